package serve

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/store"
)

// triggerDefinition: a run started because the configured definition of a
// published table differs from the one stored with it (at start, or on
// SetTables).
const triggerDefinition = "definition"

// A table's stored definition is what the table is: its rows are the fold
// of its records by that definition. When the configured one differs
// (Table.Spec, compared by materialize.DefinitionChanges), the daemon
// rebuilds the table by the configured one, whatever the table's
// rebuild_if_needed says: editing the config and reloading it is the
// request. Until that rebuild publishes, the table is served as it is, its
// follower goes on by the stored definition (materialize.KeepCurrent reads it
// from the table), GET shows definition.changed with the fields, and POST
// update is refused (409 definition_changed): an update would read on by
// the old definition a table the config says is defined otherwise.

// definitionChanges returns the fields in which table's configured
// definition differs from the one stored with its published generation.
// known is false when there is nothing to compare: the table is not
// configured with a Spec, not published, or stored without a definition.
func (s *Server) definitionChanges(db *store.DB, table string) (fields []string, known bool, err error) {
	s.mu.Lock()
	def, ok := s.tables[table]
	s.mu.Unlock()
	if !ok || def.Spec == nil {
		return nil, false, nil
	}
	stored, err := materialize.LoadSpec(db, table)
	if errors.Is(err, store.ErrTableNotFound) || errors.Is(err, materialize.ErrNoSpec) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return materialize.DefinitionChanges(stored, *def.Spec), true, nil
}

// definitionInfo is table's definition as GET /v1/tables/{table} shows it:
// whether the configured definition differs from the stored one, and in
// which fields (the config file's names); nil when there is nothing to
// compare.
func (s *Server) definitionInfo(db *store.DB, table string) (*api.Definition, error) {
	fields, known, err := s.definitionChanges(db, table)
	if err != nil || !known {
		return nil, err
	}
	if fields == nil {
		fields = []string{}
	}
	return &api.Definition{Changed: len(fields) > 0, Fields: fields}, nil
}

// rebuildChanged starts a rebuild of each of names whose configured
// definition differs from its stored one. A table whose run lock is taken
// is checked again when that run ends (runState.recheck): a run that
// started before the reload builds by the definition it started with.
func (s *Server) rebuildChanged(names []string) {
	s.mu.Lock()
	db := s.db
	s.mu.Unlock()
	if db == nil {
		return
	}
	for _, n := range names {
		fields, _, err := s.definitionChanges(db, n)
		if err != nil {
			s.cfg.Log.Error().Err(err).Str(keyTable, n).Msg("compare the configured definition with the stored one")
			continue
		}
		if len(fields) == 0 {
			continue
		}
		log := s.cfg.Log.With().Str(keyTable, n).Strs("changed", fields).Logger()
		r, err := s.startRun(n, triggerDefinition)
		switch {
		case errors.Is(err, errRunning):
			s.mu.Lock()
			s.state(n).recheck = true
			s.mu.Unlock()
			log.Info().Uint64("running", r.id).
				Msg("the configured definition differs from the published table's: rebuilding once the running run ends")
		case err != nil:
			log.Warn().Err(err).Msg("the configured definition differs from the published table's: rebuild not started")
		default:
			log.Info().Uint64("run", r.id).
				Msg("the configured definition differs from the published table's: rebuilding it by the new one; the old one stays served")
		}
	}
}

// refuseChangedDefinition answers 409 definition_changed, and returns
// true, when table's configured definition differs from its stored one.
func (s *Server) refuseChangedDefinition(w http.ResponseWriter, db *store.DB, table string) bool {
	fields, _, err := s.definitionChanges(db, table)
	if err != nil {
		s.readError(w, table, err)
		return true
	}
	if len(fields) == 0 {
		return false
	}
	writeError(w, http.StatusConflict, api.CodeDefinitionChanged, fmt.Sprintf(
		"the config defines table %q otherwise than it was built (%s): the daemon rebuilds it by the new definition (GET /v1/tables/%s shows the run); an update would go on by the old one",
		table, strings.Join(fields, ", "), table))
	return true
}
