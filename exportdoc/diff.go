package exportdoc

import (
	"encoding/json"

	"github.com/kmaterialize/kmaterialize/store"
)

// DiffLine is one changed key as `kmaterialize diff` prints it and the
// diff route sends it: {"key":K,"op":OP,"old":V,"new":V} and a newline,
// where K and V are Text (UTF-8 as is, or base64 with b64) and an
// absent side (old of an added key, new of a removed one) is null.
func DiffLine(c store.Change, b64 bool) ([]byte, error) {
	text := func(b []byte, what string) (*string, error) {
		if b == nil {
			return nil, nil
		}
		s, err := Text(c.Key, b, what, b64)
		return &s, err
	}
	k, err := text(c.Key, "key")
	if err != nil {
		return nil, err
	}
	o, err := text(c.Old, "old value")
	if err != nil {
		return nil, err
	}
	n, err := text(c.New, "new value")
	if err != nil {
		return nil, err
	}
	line, err := json.Marshal(struct {
		Key string  `json:"key"`
		Op  string  `json:"op"`
		Old *string `json:"old"`
		New *string `json:"new"`
	}{*k, string(c.Op), o, n})
	if err != nil {
		return nil, err
	}
	return append(line, '\n'), nil
}
