package main

import (
	"bytes"
	"math/rand"
	"testing"
)

// TestSpool writes past the in-memory part (so the rest goes to the
// temporary file) in uneven pieces and checks WriteTo gives back every byte
// in order.
func TestSpool(t *testing.T) {
	rng := newRand(t)
	want := make([]byte, spoolMemory+3<<20+17)
	rng.Read(want)
	var sp spool
	defer sp.Close()
	for rest := want; len(rest) > 0; {
		n := 1 + rand.New(rand.NewSource(int64(len(rest)))).Intn(200<<10)
		if n > len(rest) {
			n = len(rest)
		}
		if _, err := sp.Write(rest[:n]); err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
	}
	if sp.file == nil {
		t.Fatalf("%d bytes written and no temporary file: the test did not reach the spill", len(want))
	}
	var got bytes.Buffer
	n, err := sp.WriteTo(&got)
	if err != nil || n != int64(len(want)) || !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("WriteTo: %d bytes, %v; equal: %v", n, err, bytes.Equal(got.Bytes(), want))
	}
}
