package decode

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry"
	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry/serde"
	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry/serde/protobuf"
	"github.com/jhump/protoreflect/desc"
	"github.com/jhump/protoreflect/desc/protoparse"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/kmaterialize/kmaterialize/fold"
)

// protoJSON is the JSON mapping of decoded Protobuf values: the .proto
// file's field names, every field present.
var protoJSON = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

// protoFile is one Protobuf schema as parsed, with the message types of
// it built so far, by message index path.
type protoFile struct {
	fd    protoreflect.FileDescriptor
	types map[string]protoreflect.MessageDescriptor
}

// decodeProtobuf decodes one framed Protobuf payload with confluent's
// protobuf deserializer into a dynamic message (dynamicpb) whose type is
// built from the registry's schema of the payload's schema id: no
// generated Go types, and each version of an evolving schema has its own
// type.
func (d *Decoder) decodeProtobuf(c *codec, b []byte, where fold.Position) ([]byte, error) {
	f, err := d.framedSchema(b, protobuf.SchemaType, "Protobuf", where)
	if err != nil {
		return nil, err
	}
	s, key := f.schema, f.key
	pf, ok := s.built.(*protoFile)
	if !ok {
		fd, err := d.protoSchema(s.info)
		if err != nil {
			if rf := d.registryFailure(err, "the references of "+key.String(), where); rf != nil {
				return nil, rf
			}
			return nil, badf(err, "%s is not a usable Protobuf schema", key)
		}
		pf = &protoFile{fd: fd, types: map[string]protoreflect.MessageDescriptor{}}
		s.built = pf
	}
	md, err := pf.message(f.sid.MessageIndexes)
	if err != nil {
		return nil, badf(err, "%s", key)
	}
	// Lengths within the bytes and the nesting bounded, before
	// protobuf-go recurses into the body (its own limit is 10,000 levels).
	if err := protoCheck(md, f.body, 1); err != nil {
		return nil, badf(err, "not Protobuf %s of %s", md.FullName(), key)
	}
	msg := dynamicpb.NewMessage(md)
	err = safely(func() error { return c.proto.DeserializeInto(d.topic, b, msg) })
	if err != nil {
		if rf := d.registryFailure(err, key.String(), where); rf != nil {
			return nil, rf
		}
		return nil, badf(err, "not Protobuf %s of %s", md.FullName(), key)
	}
	j, err := protoJSON.Marshal(msg)
	if err != nil {
		return nil, badf(err, "Protobuf %s of %s", md.FullName(), key)
	}
	out, err := fold.CanonicalJSON(j)
	if err != nil {
		return nil, badf(err, "Protobuf %s of %s", md.FullName(), key)
	}
	return out, nil
}

// message returns the message type at the index path (the frame's
// message indexes: the first top-level message is [0]).
func (p *protoFile) message(indexes []int) (protoreflect.MessageDescriptor, error) {
	if len(indexes) == 0 {
		indexes = []int{0}
	}
	k := fmt.Sprint(indexes)
	if md, ok := p.types[k]; ok {
		return md, nil
	}
	msgs := p.fd.Messages()
	var md protoreflect.MessageDescriptor
	for _, i := range indexes {
		if i < 0 || i >= msgs.Len() {
			return nil, fmt.Errorf("message index %v: the schema has no such message", indexes)
		}
		md = msgs.Get(i)
		msgs = md.Messages()
	}
	p.types[k] = md
	return md, nil
}

// protoSchema parses info's .proto text with its references. Imports the
// registry does not hold (google/protobuf/*.proto, confluent/meta.proto,
// ...) come from the Go types linked into this program, as the protobuf
// serde's built-in dependencies do.
func (d *Decoder) protoSchema(info schemaregistry.SchemaInfo) (protoreflect.FileDescriptor, error) {
	deps := map[string]string{}
	if err := serde.ResolveReferences(d.client, info, deps); err != nil {
		return nil, err
	}
	const main = "schema.proto"
	p := protoparse.Parser{
		Accessor: func(name string) (io.ReadCloser, error) {
			if name == main {
				return io.NopCloser(strings.NewReader(info.Schema)), nil
			}
			if s, ok := deps[name]; ok {
				return io.NopCloser(strings.NewReader(s)), nil
			}
			return nil, os.ErrNotExist
		},
		LookupImport: func(name string) (*desc.FileDescriptor, error) {
			fd, err := protoregistry.GlobalFiles.FindFileByPath(name)
			if err != nil {
				return nil, err
			}
			return desc.WrapFile(fd)
		},
	}
	fds, err := p.ParseFiles(main)
	if err != nil {
		return nil, err
	}
	if len(fds) != 1 {
		return nil, errors.New("the schema parsed into no file")
	}
	return fds[0].UnwrapFile(), nil
}
