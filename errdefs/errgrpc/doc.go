// Package errgrpc translates between the errdefs kinds and gRPC status codes,
// in one table used by both ends: the server maps errors to statuses
// (ToGRPC), the client maps them back (ToNative), so errors.Is works the same
// on both sides of the wire. An *errdefs.EntryError travels as a
// google.rpc.BadRequest field violation "entries[N]".
package errgrpc
