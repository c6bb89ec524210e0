package restore

// Faults injects faults into an Engine, for tests: Config.Faults, nil in
// production. Every hook is optional. The engine calls them through the
// methods below, which do nothing on a nil *Faults, so a production path
// holds no branch of its own for a test.
type Faults struct {
	// Taken runs when a bridge's write owner has taken a batch of n
	// requests, before it commits them; it may block.
	Taken func(n int)
	// StreamVerdict replaces the switch's verdict on a streamed bundle.
	StreamVerdict func(error) error
	// AfterBundle runs when the switch accepted a write's changes; its
	// error stands for the bundle's outcome (a reply lost after COMMIT).
	AfterBundle func() error
	// BeforeStoreCommit runs at the end of a write's store transaction,
	// after the switch accepted it; its error rolls the transaction back
	// (a pipe's, committed while the switch decided, is undone).
	BeforeStoreCommit func() error
	// BeforeUndo runs when a pipe's store transaction committed and the
	// switch then refused it, before the store takes it back; it may block.
	BeforeUndo func()
	// NoPipe turns pipelined writes (package write) off, for tests of group
	// commit's own batches.
	NoPipe bool
	// Piped runs when a pipe sent a batch of n requests.
	Piped func(n int)
	// BeforeClear runs before each clear of flow-restore-wait.
	BeforeClear func()
	// AfterDriftFound runs after an audit marked a bridge unconverged and
	// before the replay that corrects it.
	AfterDriftFound func()
}

func (f *Faults) taken(n int) {
	if f != nil && f.Taken != nil {
		f.Taken(n)
	}
}

// verdict is the switch's verdict err on a bundle as the test has it: its
// StreamVerdict (streamed bundles only), then, when the switch accepted,
// AfterBundle.
func (f *Faults) verdict(err error, streamed bool) error {
	if f == nil {
		return err
	}
	if streamed && f.StreamVerdict != nil {
		err = f.StreamVerdict(err)
	}
	if err == nil && f.AfterBundle != nil {
		err = f.AfterBundle()
	}
	return err
}

func (f *Faults) beforeStoreCommit() error {
	if f == nil || f.BeforeStoreCommit == nil {
		return nil
	}
	return f.BeforeStoreCommit()
}

func (f *Faults) beforeUndo() {
	if f != nil && f.BeforeUndo != nil {
		f.BeforeUndo()
	}
}

func (f *Faults) pipes() bool { return f == nil || !f.NoPipe }

func (f *Faults) piped(n int) {
	if f != nil && f.Piped != nil {
		f.Piped(n)
	}
}

func (f *Faults) beforeClear() {
	if f != nil && f.BeforeClear != nil {
		f.BeforeClear()
	}
}

func (f *Faults) afterDriftFound() {
	if f != nil && f.AfterDriftFound != nil {
		f.AfterDriftFound()
	}
}

// writeFaults are the faults of the write path (write.Faults).
type writeFaults struct{ f *Faults }

func (w writeFaults) Taken(n int) { w.f.taken(n) }

func (w writeFaults) Verdict(err error, streamed bool) error { return w.f.verdict(err, streamed) }

func (w writeFaults) BeforeStoreCommit() error { return w.f.beforeStoreCommit() }

func (w writeFaults) BeforeUndo() { w.f.beforeUndo() }

func (w writeFaults) Pipes() bool { return w.f.pipes() }

func (w writeFaults) Piped(n int) { w.f.piped(n) }
