package main

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"

	"github.com/urfave/cli/v2"
)

// Key encodings of --key-encoding: how a key given on the command line is
// written.
const (
	keyUTF8   = "utf8"   // the argument's bytes as they are
	keyBase64 = "base64" // standard encoding, as scan --base64 prints keys
	keyHex    = "hex"
)

func keyEncodingFlag(what string) cli.Flag {
	return &cli.StringFlag{Name: "key-encoding", Value: keyUTF8,
		Usage: what + " are written in `ENCODING`: utf8 (as they are), base64 (standard, as scan --base64 prints keys) or hex"}
}

// keyDecoder returns the decoder of --key-encoding.
func keyDecoder(c *cli.Context) (func(flag, s string) ([]byte, error), error) {
	enc := c.String("key-encoding")
	var dec func(string) ([]byte, error)
	switch enc {
	case keyUTF8, "utf-8":
		return func(_, s string) ([]byte, error) { return []byte(s), nil }, nil
	case keyBase64:
		dec = base64.StdEncoding.DecodeString
	case keyHex:
		dec = hex.DecodeString
	default:
		return nil, &usageError{msg: fmt.Sprintf("--key-encoding %q: want utf8, base64 or hex", enc), hint: "--key-encoding base64"}
	}
	return func(flag, s string) ([]byte, error) {
		b, err := dec(s)
		if err != nil {
			return nil, &usageError{msg: fmt.Sprintf("%s %q is not %s: %v", flag, s, enc, err),
				hint: fmt.Sprintf("give it %s-encoded, or drop --key-encoding %s", enc, enc)}
		}
		return b, nil
	}, nil
}
