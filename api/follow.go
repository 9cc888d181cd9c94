package api

import (
	"encoding/json"
	"time"
)

// Follow is a followed table's follower.
type Follow struct {
	// Running is true while the follower runs.
	Running bool
	// Error is why it stopped or was interrupted, "" when it is working;
	// ErrorAt is when.
	Error   string
	ErrorAt time.Time
	// MaxLag is the most records a partition may lag for /readyz.
	MaxLag int64
	// Lag is the largest partition lag; nil before the first live marks.
	Lag            *int64
	RecordsApplied int64
	Applies        int64
	// ApplyRate is records per second over the last ~10s.
	ApplyRate float64
	// LastApply is the last apply's time, zero before the first.
	LastApply time.Time
}

type followWire struct {
	Running        bool    `json:"running"`
	Error          *string `json:"error"`
	ErrorAt        *string `json:"error_at"`
	MaxLag         int64   `json:"max_lag"`
	Lag            *int64  `json:"lag"`
	RecordsApplied int64   `json:"records_applied"`
	Applies        int64   `json:"applies"`
	ApplyRate      float64 `json:"apply_rate"`
	LastApply      *string `json:"last_apply"`
}

// MarshalJSON writes f as the daemon sends it.
func (f Follow) MarshalJSON() ([]byte, error) {
	w := followWire{Running: f.Running, MaxLag: f.MaxLag, Lag: f.Lag, RecordsApplied: f.RecordsApplied,
		Applies: f.Applies, ApplyRate: f.ApplyRate, LastApply: nanoTime(f.LastApply)}
	if f.Error != "" {
		w.Error, w.ErrorAt = &f.Error, secondTime(f.ErrorAt)
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads f as the daemon sends it.
func (f *Follow) UnmarshalJSON(b []byte) error {
	var w followWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*f = Follow{Running: w.Running, Error: deref(w.Error), MaxLag: w.MaxLag, Lag: w.Lag,
		RecordsApplied: w.RecordsApplied, Applies: w.Applies, ApplyRate: w.ApplyRate}
	var err error
	if f.ErrorAt, err = parseTime("error_at", w.ErrorAt); err != nil {
		return err
	}
	f.LastApply, err = parseTime("last_apply", w.LastApply)
	return err
}
