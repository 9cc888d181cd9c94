package decode

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/hamba/avro/v2"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// MaxDepth is the deepest nesting a record's key or value may have: Avro
// records, arrays and maps, Protobuf messages (and groups; a map's entry
// is not a level of its own, its message value is), the message-index
// path of a Protobuf frame. A value nested deeper is a bad record. JSON
// has its own bound, MaxJSONDepth.
//
// Why: the libraries decode by recursion, and a Go stack that outgrows
// its limit is a fatal error, not a panic, so a deep value must be
// refused before any library sees it (a recursive schema lets a record of
// a few bytes a level nest as deep as its length).
const MaxDepth = 64

// MaxJSONDepth is the deepest nesting of objects and arrays in a JSON (or
// JSON Schema) key or value: encoding/json's own limit, checked before any
// parser sees the text, so JSON values nest as deep as they always could.
const MaxJSONDepth = 10000

// The bounds of this file are checked before a payload is handed to a
// library (confluent's serdes, hamba/avro, protobuf-go): a length or count
// read from the record's bytes is what the libraries allocate from, and a
// runtime out of memory is a fatal error that no recover() sees. Each
// check reads the bytes the way the library will and refuses what would
// make it allocate more than the record holds.

// errTooDeep is the cause of a value nested deeper than MaxDepth, and
// errJSONTooDeep of JSON deeper than MaxJSONDepth.
var (
	errTooDeep     = fmt.Errorf("nested deeper than %d levels", MaxDepth)
	errJSONTooDeep = fmt.Errorf("nested deeper than %d levels", MaxJSONDepth)
)

// protoIndexes checks the message indexes of a Protobuf frame, b being the
// bytes after the magic byte and schema id: a zigzag varint count, then
// that many zigzag varint indexes (a count of 0 stands for [0]). A count
// larger than the bytes that remain cannot be true (each index takes at
// least one byte); it would make the serde allocate that many ints.
func protoIndexes(b []byte) error {
	count, n := binary.Varint(b)
	switch {
	case n <= 0:
		return errors.New("message-index count: not a varint")
	case count < 0:
		return fmt.Errorf("message-index count %d is negative", count)
	case count > int64(len(b)-n):
		return fmt.Errorf("message-index count %d exceeds the %d bytes that remain", count, len(b)-n)
	case count > MaxDepth:
		return fmt.Errorf("message-index count %d: %w", count, errTooDeep)
	}
	b = b[n:]
	for i := int64(0); i < count; i++ {
		idx, n := binary.Varint(b)
		switch {
		case n <= 0:
			return fmt.Errorf("message index %d: not a varint", i)
		case idx < 0 || idx > math.MaxInt32:
			return fmt.Errorf("message index %d is %d: out of range", i, idx)
		}
		b = b[n:]
	}
	return nil
}

// protoCheck checks a Protobuf message body of type md: every tag and
// length readable within the bytes, and messages nested at most MaxDepth
// deep (depth is md's level, 1 for the top message). Unknown fields are
// skipped, their groups nested within the same bound.
func protoCheck(md protoreflect.MessageDescriptor, b []byte, depth int) error {
	_, err := protoFields(md, b, depth, 0)
	return err
}

// protoFields walks the fields of b at depth; group is the field number
// of the group whose fields these are (0: a whole message, which ends
// with b). It returns the bytes consumed, the end-group tag included.
func protoFields(md protoreflect.MessageDescriptor, b []byte, depth int, group protowire.Number) (int, error) {
	if depth > MaxDepth {
		return 0, errTooDeep
	}
	start := len(b)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, fmt.Errorf("tag at byte %d: %w", start-len(b), protowire.ParseError(n))
		}
		b = b[n:]
		var fd protoreflect.FieldDescriptor
		if md != nil {
			fd = md.Fields().ByNumber(num)
		}
		switch typ {
		case protowire.EndGroupType:
			if num != group {
				return 0, fmt.Errorf("field %d: end of group %d that is not open", num, num)
			}
			return start - len(b), nil
		case protowire.StartGroupType:
			var sub protoreflect.MessageDescriptor
			if fd != nil && fd.Kind() == protoreflect.GroupKind {
				sub = fd.Message()
			}
			n, err := protoFields(sub, b, depth+1, num)
			if err != nil {
				return 0, fmt.Errorf("field %d: %w", num, err)
			}
			b = b[n:]
			continue
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return 0, fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
			}
			if fd != nil && fd.Kind() == protoreflect.MessageKind {
				level := depth + 1
				if fd.IsMap() {
					level = depth // the entry is not a level; its value is
				}
				if err := protoCheck(fd.Message(), v, level); err != nil {
					return 0, fmt.Errorf("field %d: %w", num, err)
				}
			}
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return 0, fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
	}
	if group != 0 {
		return 0, fmt.Errorf("group %d: not closed", group)
	}
	return start, nil
}

// avroCheck checks an Avro body b of schema s the way hamba/avro reads it,
// before it does: every string, bytes and fixed within the bytes that
// remain, union and enum indexes in range, records, arrays and maps
// nested at most MaxDepth deep, and no more array items and map entries
// in all than the body has bytes plus freeItems. hamba grows an array by
// its block's count before reading the items, so a block count is what
// it allocates from, and an item may take no bytes (null, an empty
// record): the last bound is what keeps a few bytes from asking for 2^60
// items.
func avroCheck(s avro.Schema, b []byte) error {
	w := avroWalk{b: b}
	return w.value(s, 0)
}

// freeItems is how many array items and map entries an Avro value may
// hold beyond one a byte: room for arrays of items that take no bytes (a
// few MiB of slices at most), whatever the record's length.
const freeItems = 1 << 16

// avroWalk is a position in an Avro body, and the items and entries
// counted so far.
type avroWalk struct {
	b     []byte
	pos   int
	items int64
}

func (w *avroWalk) remaining() int { return len(w.b) - w.pos }

// varint reads a zigzag varint of at most max bytes (5 for an int, 10 for
// a long), as hamba's ReadInt and ReadLong do.
func (w *avroWalk) varint(what string, max int) (int64, error) {
	var v uint64
	var s uint
	for i := 0; i < max; i++ {
		if w.pos >= len(w.b) {
			return 0, fmt.Errorf("%s at byte %d: truncated", what, w.pos)
		}
		c := w.b[w.pos]
		w.pos++
		v |= uint64(c&0x7f) << s
		if c&0x80 == 0 {
			if max == 5 {
				u := uint32(v)
				return int64(int32((u >> 1) ^ -(u & 1))), nil
			}
			return int64((v >> 1) ^ -(v & 1)), nil
		}
		s += 7
	}
	return 0, fmt.Errorf("%s at byte %d: varint longer than %d bytes", what, w.pos, max)
}

// skip consumes n bytes of a string, bytes or fixed whose length is at
// byte at.
func (w *avroWalk) skip(what string, n int64, at int) error {
	if n < 0 {
		return fmt.Errorf("%s at byte %d: negative length %d", what, at, n)
	}
	if n > int64(w.remaining()) {
		return fmt.Errorf("%s at byte %d: length %d exceeds the %d bytes that remain", what, at, n, w.remaining())
	}
	w.pos += int(n)
	return nil
}

func (w *avroWalk) length(what string) error {
	at := w.pos
	n, err := w.varint(what+" length", 10)
	if err != nil {
		return err
	}
	return w.skip(what, n, at)
}

// blocks walks an array's or a map's blocks, calling item for each item
// or entry.
func (w *avroWalk) blocks(what string, item func() error) error {
	for {
		at := w.pos
		count, err := w.varint(what+" block count", 10)
		if err != nil {
			return err
		}
		if count == 0 {
			return nil
		}
		if count < 0 {
			if count == math.MinInt64 {
				return fmt.Errorf("%s block count at byte %d: out of range", what, at)
			}
			count = -count
			// The block's size in bytes follows; hamba reads and ignores it.
			if _, err := w.varint(what+" block size", 10); err != nil {
				return err
			}
		}
		if budget := int64(len(w.b)) + freeItems - w.items; count > budget {
			return fmt.Errorf("%s block count %d at byte %d: more items than a value of %d bytes may hold (%d)",
				what, count, at, len(w.b), int64(len(w.b))+freeItems)
		}
		w.items += count
		for i := int64(0); i < count; i++ {
			if err := item(); err != nil {
				return err
			}
		}
	}
}

// value walks one value of schema s, nested depth levels deep.
func (w *avroWalk) value(s avro.Schema, depth int) error {
	if r, ok := s.(*avro.RefSchema); ok {
		s = r.Schema()
	}
	switch s := s.(type) {
	case *avro.NullSchema:
		return nil
	case *avro.PrimitiveSchema:
		switch s.Type() {
		case avro.Boolean:
			return w.skip("boolean", 1, w.pos)
		case avro.Int:
			_, err := w.varint("int", 5)
			return err
		case avro.Long:
			_, err := w.varint("long", 10)
			return err
		case avro.Float:
			return w.skip("float", 4, w.pos)
		case avro.Double:
			return w.skip("double", 8, w.pos)
		case avro.String, avro.Bytes:
			return w.length(string(s.Type()))
		}
	case *avro.RecordSchema:
		if depth+1 > MaxDepth {
			return errTooDeep
		}
		for _, f := range s.Fields() {
			if err := w.value(f.Type(), depth+1); err != nil {
				return fmt.Errorf("%s.%s: %w", s.FullName(), f.Name(), err)
			}
		}
		return nil
	case *avro.EnumSchema:
		at := w.pos
		i, err := w.varint("enum index", 5)
		if err != nil {
			return err
		}
		if i < 0 || i >= int64(len(s.Symbols())) {
			return fmt.Errorf("enum %s index %d at byte %d: out of range", s.FullName(), i, at)
		}
		return nil
	case *avro.ArraySchema:
		if depth+1 > MaxDepth {
			return errTooDeep
		}
		return w.blocks("array", func() error { return w.value(s.Items(), depth+1) })
	case *avro.MapSchema:
		if depth+1 > MaxDepth {
			return errTooDeep
		}
		return w.blocks("map", func() error {
			if err := w.length("map key"); err != nil {
				return err
			}
			return w.value(s.Values(), depth+1)
		})
	case *avro.UnionSchema:
		at := w.pos
		i, err := w.varint("union index", 5)
		if err != nil {
			return err
		}
		types := s.Types()
		if i < 0 || i >= int64(len(types)) {
			return fmt.Errorf("union index %d at byte %d: out of range", i, at)
		}
		return w.value(types[i], depth)
	case *avro.FixedSchema:
		return w.skip("fixed "+s.FullName(), int64(s.Size()), w.pos)
	}
	return fmt.Errorf("unsupported Avro schema %s", s.Type())
}

// jsonDepth checks that the JSON text b nests objects and arrays at most
// MaxJSONDepth deep. It only counts brackets outside strings; whether b is
// JSON at all is for the parser to say.
func jsonDepth(b []byte) error {
	depth := 0
	inString, escaped := false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			if depth > MaxJSONDepth {
				return errJSONTooDeep
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return nil
}
