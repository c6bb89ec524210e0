package ovsconfig

// BridgeProtocols returns the protocols column of bridge name (empty means
// OVS's default versions) and whether the bridge exists in the cache.
func (c *Client) BridgeProtocols(name string) ([]string, bool) {
	bridges, err := c.Bridges()
	if err != nil {
		return nil, false
	}
	for _, b := range bridges {
		if b.Name == name {
			return b.Protocols, true
		}
	}
	return nil, false
}
