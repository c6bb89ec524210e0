package ovsconfig

// OVSVersion returns the Open_vSwitch table's ovs_version column: the
// version ovs-ctl wrote when it last started the daemons ("" when nothing
// did: a CNI's own start script, a sandbox). vswitchd never writes it, so
// it may name a package since upgraded; the OpenFlow description of a
// bridge (ofconn.Conn.Describe) names the vswitchd that runs.
func (c *Client) OVSVersion() (string, error) {
	row, err := c.state()
	if err != nil {
		return "", err
	}
	if row.OVSVersion == nil {
		return "", nil
	}
	return *row.OVSVersion, nil
}
