package datadir

// Peek reads what Identify reads (after syncing the filesystem, as
// Identify does) and returns the decision Identify would make on local
// facts alone, writing nothing: no storage id is made and the Dir stays
// opened, so a later Identify still runs. It is for tools that inspect a
// stopped broker's directory (felix log inspect) and must judge its log
// store as the broker's next start would (the previous run's LastRun)
// without changing what that start finds.
func (d *Dir) Peek() (Decision, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.phase != phaseOpened {
		return Decision{}, errStepOrderf("Peek", phaseOpened, d.phase)
	}
	f, _, err := d.gatherFacts()
	if err != nil {
		return Decision{}, err
	}
	return Decide(f), nil
}
