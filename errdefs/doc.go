// Package errdefs holds the error kinds shared by flowstate's server, store and
// client. Errors are wrapped with %w where they arise, so callers test them with
// errors.Is; the server maps them to gRPC codes in one place and the client maps
// the codes back, so a controller sees the same kinds on both sides of the wire.
package errdefs
