package replication

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestScripts runs the scenarios in testdata/*.txt. Commands:
//
//	init replicas=(a,b,c) [pass=N]     new cluster, every node started
//	assign leader=X [counted=(a,b)] [skip=(c)]
//	                                   control plane promotes X at epoch+1;
//	                                   counted defaults to every node's id;
//	                                   skipped nodes miss the assignment
//	propose node=X id=N mode=quorum|leader|all payloads=(p,q)
//	stabilize [verbose]                deliver until quiet; prints acks,
//	                                   data commits (and messages if verbose)
//	tick [n=N] [verbose]               n ticks of every node, each stabilized
//	crash node=X                       the process dies (its store stays)
//	restart node=X [wipe]              a new process; wipe = empty directory
//	                                   and a new storage id
//	drop from=X to=Y | heal            lose messages from X to Y
//	status                             roles, marks and data logs
//	report node=X                      X's last report
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if filepath.Ext(path) != ".txt" {
			return
		}
		var c *cluster
		drops := map[[2]NodeID]bool{}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			verbose := d.HasArg("verbose")
			if c != nil {
				c.verbose = verbose
			}
			switch d.Cmd {
			case "init":
				var names []string
				d.ScanArgs(t, "replicas", &names)
				pass := 1
				d.MaybeScanArgs(t, "pass", &pass)
				c = newCluster(t, names, pass, Rules{})
				c.drop = func(m Message) bool { return drops[[2]NodeID{m.From, m.To}] }
				c.stabilize()
				return "ok"
			case "assign":
				var leader string
				d.ScanArgs(t, "leader", &leader)
				counted := c.registered()
				if d.HasArg("counted") {
					var names []string
					d.ScanArgs(t, "counted", &names)
					counted = map[NodeID]StorageID{}
					for _, n := range names {
						counted[NodeID(n)] = c.nodes[NodeID(n)].sid
					}
				}
				var skip []string
				if d.HasArg("skip") {
					d.ScanArgs(t, "skip", &skip)
				}
				for _, n := range skip {
					c.nodes[NodeID(n)].up = false
				}
				c.promote(NodeID(leader), counted)
				for _, n := range skip {
					c.nodes[NodeID(n)].up = true
				}
				c.stabilize()
				return c.takeTrace() + "\n" + c.statusLines()
			case "propose":
				var n, mode string
				var id int
				var payloads []string
				d.ScanArgs(t, "node", &n)
				d.ScanArgs(t, "id", &id)
				d.ScanArgs(t, "mode", &mode)
				d.ScanArgs(t, "payloads", &payloads)
				c.propose(NodeID(n), ProposalID(id), parseMode(t, mode), payloads...)
				return "ok"
			case "stabilize":
				c.stabilize()
				return orOK(c.takeTrace())
			case "tick":
				n := 1
				d.MaybeScanArgs(t, "n", &n)
				c.tick(n)
				return orOK(c.takeTrace())
			case "crash":
				var n string
				d.ScanArgs(t, "node", &n)
				c.crash(NodeID(n))
				return "ok"
			case "restart":
				var n string
				d.ScanArgs(t, "node", &n)
				if c.nodes[NodeID(n)].up {
					c.crash(NodeID(n))
				}
				c.start(NodeID(n), d.HasArg("wipe"))
				return fmt.Sprintf("%s id=%s inc=%d", n, c.nodes[NodeID(n)].sid, c.nodes[NodeID(n)].inc)
			case "drop":
				var from, to string
				d.ScanArgs(t, "from", &from)
				d.ScanArgs(t, "to", &to)
				drops[[2]NodeID{NodeID(from), NodeID(to)}] = true
				return "ok"
			case "heal":
				clear(drops)
				return "ok"
			case "status":
				return c.statusLines()
			case "report":
				var n string
				d.ScanArgs(t, "node", &n)
				return renderReport(c.reports[NodeID(n)])
			default:
				return fmt.Sprintf("unknown command %q", d.Cmd)
			}
		})
	})
}

func orOK(s string) string {
	if strings.TrimSpace(s) == "" {
		return "ok"
	}
	return s
}

func parseMode(t testing.TB, s string) AckMode {
	switch s {
	case "leader":
		return AckLeader
	case "quorum":
		return AckQuorum
	case "all":
		return AckAll
	}
	t.Fatalf("bad mode %q", s)
	return 0
}
