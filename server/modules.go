package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
)

// knownModules returns the modules flowstated knows by more than a ready
// mark: those required (--require-module), proxied (--openflow-proxy) or
// declaring entries, sorted. A ready mark alone makes no module known, or a typo in
// `flowctl ready` would make one.
func (s *service) knownModules() (required map[string]bool, known []string, err error) {
	modules, err := s.state.Modules()
	if err != nil {
		return nil, nil, err
	}
	counts, err := s.store.Entries().Counts()
	if err != nil {
		return nil, nil, err
	}
	required = map[string]bool{}
	for name, st := range modules {
		if st.Required {
			required[name] = true
			known = append(known, name)
		}
	}
	for _, c := range counts {
		known = append(known, c.Module)
	}
	if s.proxies != nil {
		for _, p := range s.proxies.list {
			known = append(known, p.spec.Module) // --openflow-proxy: recorded as it connects
		}
	}
	slices.Sort(known)
	return required, slices.Compact(known), nil
}

// checkKnown refuses a MarkReady of a module that is neither required nor
// declares entries: its mark would open no gate and stay forever.
func (s *service) checkKnown(module string) error {
	_, known, err := s.knownModules()
	if err != nil {
		return err
	}
	if slices.Contains(known, module) {
		return nil
	}
	return fmt.Errorf("module %q is unknown: not required (--require-module), not proxied (--openflow-proxy) and it declares no entries, so nothing waits for it to be ready%s: %w",
		module, closest(module, known), errdefs.ErrFailedPrecondition)
}

func (s *service) ForgetModule(ctx context.Context, req *flowstatev1.ForgetModuleRequest) (*flowstatev1.ForgetModuleResponse, error) {
	module := req.GetModule()
	if err := entry.ValidateName("module", module); err != nil {
		return nil, toGRPC(fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument))
	}
	if err := s.writers.authorize(ctx, module); err != nil {
		return nil, toGRPC(err)
	}
	required, known, err := s.knownModules()
	if err != nil {
		return nil, toGRPC(err)
	}
	if required[module] {
		return nil, toGRPC(fmt.Errorf("module %s is required (--require-module): drop it from flowstated's flags instead: %w",
			module, errdefs.ErrFailedPrecondition))
	}
	declared, bridges, err := s.store.Modules().Forget(module)
	if errors.Is(err, errdefs.ErrNotFound) {
		err = fmt.Errorf("module %q is unknown: nothing to forget%s: %w", module, closest(module, known), errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, toGRPC(err)
	}
	if declared > 0 {
		return nil, toGRPC(fmt.Errorf("module %s declares %d entries (on %s): delete them first (flowctl del-flows, del-groups, del-meters --module %s): %w",
			module, declared, strings.Join(bridges, ", "), module, errdefs.ErrFailedPrecondition))
	}
	s.log.Info("module forgotten", "module", module)
	return &flowstatev1.ForgetModuleResponse{}, nil
}

// closest names the known module nearest to name by edit distance, as
// " (did you mean "x"?)", or "" when none is within half of name's length.
func closest(name string, known []string) string {
	best, bestD := "", len(name)/2+1
	for _, k := range known {
		if d := editDistance(name, k); d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" {
		return ""
	}
	return " (did you mean " + strconv.Quote(best) + "?)"
}

// editDistance is the Levenshtein distance of a and b, in bytes (module
// names are ASCII: entry.ValidateName).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := prev[j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			cur[j] = min(sub, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
