package ofctl

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"
)

// stricterThanOVS are the errors where ParseFlow rejects a line on purpose
// although ovs-ofctl accepts it (ovs-ofctl then silently drops a field or
// sends bytes vswitchd refuses).
var stricterThanOVS = []string{
	"missing prerequisite",
	"requires \"commit\"",
	"outside the mask",
	"bad IPv4 address",
}

// TestRecombinedAgainstOVS builds lines from random combinations of the
// corpus's match fields and actions, with a fixed seed, and checks each
// against ovs-ofctl: both reject it, or both accept it with the same bytes,
// or ParseFlow rejects it for one of the stricterThanOVS reasons.
func TestRecombinedAgainstOVS(t *testing.T) {
	needOVS(t)
	ctx := testCtx(t, 50*time.Second)
	var matchToks, actToks []string
	for _, l := range readCorpus(t, "testdata/flows.txt") {
		m, a, ok := strings.Cut(l, "actions=")
		if !ok {
			continue
		}
		parts, _ := splitTop(strings.TrimSuffix(m, ","), ',', 0)
		for _, p := range parts {
			if p != "" && !strings.HasPrefix(p, "table=") && !strings.HasPrefix(p, "priority=") {
				matchToks = append(matchToks, p)
			}
		}
		acts, _ := splitTop(a, ',', 0)
		actToks = append(actToks, acts...)
	}
	rng := rand.New(rand.NewSource(1))
	pick := func(list []string, max int) []string {
		n := 1 + rng.Intn(max)
		out := make([]string, n)
		for i := range out {
			out[i] = list[rng.Intn(len(list))]
		}
		return out
	}
	both, agree, stricter := 0, 0, 0
	for i := 0; i < 300; i++ {
		line := "table=" + strconv.Itoa(rng.Intn(3)) + ",priority=" + strconv.Itoa(rng.Intn(1000)) + "," +
			strings.Join(pick(matchToks, 4), ",") + ",actions=" + strings.Join(pick(actToks, 3), ",")
		fm, perr := ParseFlow(line)
		_, want, oerr := ofctlParse(ctx, line)
		var oe *ofctlError
		if oerr != nil && !errors.As(oerr, &oe) {
			t.Fatal(oerr)
		}
		switch {
		case perr != nil && oerr != nil:
			both++
		case perr != nil:
			ok := false
			for _, s := range stricterThanOVS {
				ok = ok || strings.Contains(perr.Error(), s)
			}
			if !ok {
				t.Errorf("ParseFlow rejects what ovs-ofctl accepts: %q: %v", line, perr)
			}
			stricter++
		case oerr != nil:
			t.Errorf("ParseFlow accepts what ovs-ofctl rejects: %q: %v", line, oerr)
		default:
			agree++
			got, err := fm.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(withoutXid(got), withoutXid(want)) {
				t.Errorf("bytes differ for %q\n got %s\nwant %s", line, hex.EncodeToString(got), hex.EncodeToString(want))
			}
		}
	}
	t.Logf("both reject %d, both accept %d, only ovs-ofctl accepts %d", both, agree, stricter)
	if agree < 50 {
		t.Errorf("only %d lines accepted by both; the test proves little", agree)
	}
}
