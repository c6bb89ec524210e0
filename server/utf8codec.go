package server

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/flowstate-io/flowstate/errdefs"
)

// Invalid UTF-8
//
// protobuf refuses a request whose string field is not UTF-8, and grpc-go
// answers INTERNAL before any handler or interceptor runs (the status is
// written inside RecvMsg). So the codec (utf8Codec) decodes such a request
// with the bad strings emptied and records the field's path in an unknown
// field of the message (badUTF8Field); the service's handlers
// (withDecodeErrors) find it after decoding and answer INVALID_ARGUMENT
// naming the field. A client that sends that field itself only gets its own
// request refused.

// badUTF8Field is the unknown field number carrying the path of a string
// that was not UTF-8: the largest field number, which the API never uses.
const badUTF8Field protowire.Number = protowire.MaxValidNumber

// withDecodeErrors returns a copy of desc whose handlers refuse a request the
// codec marked as holding invalid UTF-8.
func withDecodeErrors(desc *grpc.ServiceDesc) *grpc.ServiceDesc {
	d := *desc
	d.Methods = make([]grpc.MethodDesc, len(desc.Methods))
	for i, m := range desc.Methods {
		h := m.Handler
		m.Handler = func(srv any, ctx context.Context, dec func(any) error, in grpc.UnaryServerInterceptor) (any, error) {
			return h(srv, ctx, func(v any) error { return decodeError(v, dec(v)) }, in)
		}
		d.Methods[i] = m
	}
	d.Streams = make([]grpc.StreamDesc, len(desc.Streams))
	for i, s := range desc.Streams {
		h := s.Handler
		s.Handler = func(srv any, stream grpc.ServerStream) error {
			return h(srv, decodingStream{stream})
		}
		d.Streams[i] = s
	}
	return &d
}

type decodingStream struct{ grpc.ServerStream }

func (s decodingStream) RecvMsg(m any) error { return decodeError(m, s.ServerStream.RecvMsg(m)) }

// decodeError returns err, or the refusal of a message the codec marked.
func decodeError(v any, err error) error {
	m, ok := v.(proto.Message)
	if err != nil || !ok {
		return err
	}
	for b := m.ProtoReflect().GetUnknown(); len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		if num == badUTF8Field && typ == protowire.BytesType {
			path, _ := protowire.ConsumeString(b)
			return toGRPC(fmt.Errorf("request: field %s contains invalid UTF-8: strings must be UTF-8 (send raw bytes as an encoded entry, Entry.openflow): %w",
				path, errdefs.ErrInvalidArgument))
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return nil
		}
		b = b[n:]
	}
	return nil
}

// utf8Codec is the proto codec, except for requests whose strings are not
// UTF-8 (see Invalid UTF-8 above).
type utf8Codec struct{}

func (utf8Codec) Name() string { return "proto" }

func (utf8Codec) Marshal(v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("grpc codec: %T is not a proto message", v)
	}
	return proto.Marshal(m)
}

func (utf8Codec) Unmarshal(b []byte, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("grpc codec: %T is not a proto message", v)
	}
	err := proto.Unmarshal(b, m)
	if err == nil || !strings.Contains(err.Error(), "invalid UTF-8") {
		return err
	}
	clean, path := withoutBadUTF8(m.ProtoReflect().Descriptor(), b)
	if path == "" {
		return err
	}
	proto.Reset(m)
	if err := proto.Unmarshal(clean, m); err != nil {
		return err
	}
	r := m.ProtoReflect()
	mark := protowire.AppendTag(nil, badUTF8Field, protowire.BytesType)
	r.SetUnknown(append(r.GetUnknown(), protowire.AppendString(mark, path)...))
	return nil
}

// withoutBadUTF8 returns the encoded message b with every string that is not
// UTF-8 emptied, and the path ("entries[2].text") of the first, or "".
func withoutBadUTF8(md protoreflect.MessageDescriptor, b []byte) (out []byte, first string) {
	seen := map[protowire.Number]int{}
	out = make([]byte, 0, len(b))
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return out, first
		}
		tag := b[:n]
		b = b[n:]
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return out, first
		}
		val := b[:n]
		b = b[n:]
		fd := md.Fields().ByNumber(num)
		if fd == nil || typ != protowire.BytesType || (fd.Kind() != protoreflect.StringKind && fd.Kind() != protoreflect.MessageKind) {
			out = append(append(out, tag...), val...)
			continue
		}
		name := string(fd.Name())
		if fd.IsList() {
			name = fmt.Sprintf("%s[%d]", name, seen[num])
			seen[num]++
		}
		v, _ := protowire.ConsumeBytes(val)
		out = append(out, tag...)
		if fd.Kind() == protoreflect.StringKind {
			if !utf8.Valid(v) {
				v = nil
				if first == "" {
					first = name
				}
			}
			out = protowire.AppendBytes(out, v)
			continue
		}
		sub, p := withoutBadUTF8(fd.Message(), v)
		if first == "" && p != "" {
			first = name + "." + p
		}
		out = protowire.AppendBytes(out, sub)
	}
	return out, first
}
