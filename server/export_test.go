package server

// SetMaxStatusQuarantined bounds the quarantined entries a Status reply
// lists to n until the returned function restores the bound.
func SetMaxStatusQuarantined(n int) (restore func()) {
	old := maxStatusQuarantined.Swap(int32(n))
	return func() { maxStatusQuarantined.Store(old) }
}
