package config

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"
)

// LoadProperties reads a kcat-style librdkafka properties file (kcat -F):
// one KEY=VALUE per line, split at the first '='; blank lines and lines
// whose first non-blank character is '#' are skipped; whitespace around the
// key and around the value is trimmed (a value keeps any '=' and '#' it
// holds). ${NAME} is not expanded, as in kcat. A later line for the same key
// wins. A line without '=' or with an empty key is an *Error naming the file
// and line, never the line's text (it may hold a secret).
func LoadProperties(path string) (Properties, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &Error{Path: path, Msg: err.Error(), Err: err}
	}
	return ParseProperties(data, path)
}

// ParseProperties parses the bytes of a properties file; path is for
// messages. See LoadProperties.
func ParseProperties(data []byte, path string) (Properties, error) {
	props := Properties{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if line == 1 {
			text = strings.TrimPrefix(text, "\ufeff") // a byte order mark
		}
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		k, v, ok := strings.Cut(text, "=")
		k = strings.TrimSpace(k)
		switch {
		case !ok:
			return nil, &Error{Path: path, Line: line, Msg: "not KEY=VALUE (a librdkafka property per line, # for comments)"}
		case k == "":
			return nil, &Error{Path: path, Line: line, Msg: "a property with an empty name"}
		}
		props[k] = strings.TrimSpace(v)
	}
	if err := sc.Err(); err != nil {
		return nil, &Error{Path: path, Line: line + 1, Msg: fmt.Sprintf("unreadable line: %v", err), Err: err}
	}
	return props, nil
}
