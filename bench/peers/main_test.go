package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestQuick runs the whole comparison in -quick mode against the servers it
// starts, and checks the report: a row for every library, no scenario
// failed by redisync, no mutual-exclusion violation for redisync in B and
// H, and in H local passes by the Mutex only, and the other client served.
func TestQuick(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not in PATH")
	}
	dir := t.TempDir()
	jsonPath, svgPath := filepath.Join(dir, "peers.json"), filepath.Join(dir, "peers.svg")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, progress bytes.Buffer
	err := run(ctx, []string{"-quick", "-runs", "1", "-json", jsonPath, "-svg", svgPath}, &out, &progress)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, progress.String())
	}
	md := out.String()
	t.Log("\n" + md)
	// A peer may fail a scenario on a loaded machine (the report lists it);
	// redisync may not.
	for line := range strings.Lines(progress.String()) {
		if strings.Contains(line, "error:") {
			if strings.Contains(line, "redisync") {
				t.Errorf("redisync failed a scenario: %s", line)
			} else {
				t.Logf("a peer failed a scenario: %s", line)
			}
		}
	}
	for _, lib := range libraries() {
		if !strings.Contains(md, "| "+lib.label+" |") {
			t.Errorf("no row for %s", lib.label)
		}
	}

	for _, label := range []string{"redisync Mutex", "redisync Mutex, no local passes", "redisync FairMutex"} {
		// | library | cycles/s | overlaps | lost updates | share min/max | errors |
		cells := row(t, md, "### B.", label)
		if len(cells) != 6 {
			t.Fatalf("B row of %s: %q", label, cells)
		}
		if cells[1] == "n/a" || cells[1] == "0" {
			t.Errorf("B row of %s: no cycles: %q", label, cells)
		}
		if cells[2] != "0" || cells[3] != "0" {
			t.Errorf("B row of %s: overlaps %s, lost updates %s; want 0 and 0", label, cells[2], cells[3])
		}
	}

	// | library | cycles/s | overlaps | lost updates | errors | passed locally % | cmds/cycle |
	// server CPU µs/cycle | other client's wait p50 ms | p99 ms | other client's acquisitions |
	for _, label := range []string{"redisync Mutex", "redisync Mutex, no local passes", "redisync FairMutex"} {
		cells := row(t, md, "### H.", label)
		if len(cells) != 11 {
			t.Fatalf("H row of %s: %q", label, cells)
		}
		if cells[1] == "n/a" || cells[1] == "0" {
			t.Errorf("H row of %s: no cycles: %q", label, cells)
		}
		if cells[2] != "0" || cells[3] != "0" {
			t.Errorf("H row of %s: overlaps %s, lost updates %s; want 0 and 0", label, cells[2], cells[3])
		}
		if cells[10] == "n/a" || cells[10] == "0" {
			t.Errorf("H row of %s: the other client never got the lock: %q", label, cells)
		}
		passes := cells[5] != "0"
		if want := label == "redisync Mutex"; passes != want {
			t.Errorf("H row of %s: passed locally %s%%; want passes: %v", label, cells[5], want)
		}
	}

	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Metrics map[string]map[string]struct{ Median *float64 } `json:"metrics"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("JSON: %v", err)
	}
	if m := doc.Metrics["A.cycles"]["redisync"].Median; m == nil || *m <= 0 {
		t.Errorf("JSON: no A.cycles for redisync")
	}
	svg, err := os.ReadFile(svgPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(svg, []byte("<svg")) || !bytes.HasSuffix(bytes.TrimSpace(svg), []byte("</svg>")) {
		t.Errorf("SVG: not an svg document")
	}
}

// row returns the cells of the row of label in the first table after the
// line starting with heading.
func row(t *testing.T, md, heading, label string) []string {
	t.Helper()
	i := strings.Index(md, "\n"+heading)
	if i < 0 {
		t.Fatalf("no section %q", heading)
	}
	for line := range strings.Lines(md[i+1:]) {
		if strings.HasPrefix(line, "| "+label+" |") {
			var cells []string
			for _, c := range strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|") {
				cells = append(cells, strings.TrimSpace(c))
			}
			return cells
		}
	}
	t.Fatalf("no row %q after %q", label, heading)
	return nil
}
