package canon

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/flowstate-io/flowstate/entry"
)

// DefaultFlowText is the flow vswitchd puts on a new bridge in standalone
// fail mode, as ovs-ofctl prints it.
const DefaultFlowText = "priority=0 actions=NORMAL"

// defaultFlow is the canonical payload of DefaultFlowText, built once.
var defaultFlow = sync.OnceValue(func() []byte {
	payload, _, err := Parse(entry.KindFlow, DefaultFlowText)
	if err != nil {
		// A fixed text the package's own tests parse: failing here is a
		// broken build, not bad input.
		panic(fmt.Sprintf("canon: the default flow %q does not parse: %v", DefaultFlowText, err))
	}
	return payload
})

// IsDefaultFlow reports whether payload, a canonical FLOW_MOD (declared, or
// dumped and brought through FromSwitch), is vswitchd's default flow of a
// new bridge: table 0, priority 0, no match, cookie 0, no timeouts, flags or
// importance, and the one action output:NORMAL. It compares bytes, so it
// needs no printing.
func IsDefaultFlow(payload []byte) bool { return bytes.Equal(payload, defaultFlow()) }
