// Command testsummary reads `go test -json` on stdin and prints, per
// package, how many tests passed, were skipped and failed, with how many of
// the skips were kfake-only (localkafka.KfakeOnlyReason). It prints the
// output of failed tests and of packages that failed, and drops the rest
// (-json implies -v, and the tests log a lot). It exits 1 when a test or a
// package failed, or when the input held no test event at all.
//
//	go test -json ./replay/ | go run ./scripts/testsummary
//
// scripts/test-kafka uses it when KMATERIALIZE_TEST_SUMMARY=1.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
)

// kfakeOnly is localkafka.KfakeOnlyReason; the command does not import the
// package (it would link kfake for one string).
const kfakeOnly = "kfake-only: needs fault injection"

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

type counts struct{ passed, skipped, kfakeOnly, failed int }

func main() {
	out := map[string][]string{} // package + "\x00" + test -> output lines
	per := map[string]*counts{}
	failedPkg := map[string]bool{}
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	events := 0
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Println(sc.Text()) // a build error, not JSON
			continue
		}
		events++
		if per[e.Package] == nil && e.Package != "" {
			per[e.Package] = &counts{}
		}
		c := per[e.Package]
		key := e.Package + "\x00" + e.Test
		switch e.Action {
		case "build-output", "build-fail":
			fmt.Print(e.Output) // a package that did not build
			continue
		case "output":
			out[key] = append(out[key], e.Output)
		case "pass", "skip", "fail":
			if e.Test == "" {
				if e.Action == "fail" {
					failedPkg[e.Package] = true
					fmt.Print(strings.Join(out[key], ""))
				}
				break
			}
			switch e.Action {
			case "pass":
				c.passed++
			case "skip":
				c.skipped++
				if strings.Contains(strings.Join(out[key], ""), kfakeOnly) {
					c.kfakeOnly++
				}
			case "fail":
				c.failed++
				fmt.Print(strings.Join(out[key], ""))
			}
			delete(out, key)
		}
	}
	pkgs := make([]string, 0, len(per))
	for p := range per {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	bad := events == 0
	var all counts
	for _, p := range pkgs {
		c := per[p]
		if c.passed+c.skipped+c.failed == 0 && !failedPkg[p] {
			continue // no test files, or none matched -run
		}
		fmt.Printf("%s: %d passed, %d skipped (%d kfake-only), %d failed\n", p, c.passed, c.skipped, c.kfakeOnly, c.failed)
		if c.failed > 0 || failedPkg[p] {
			bad = true
		}
		all.passed, all.skipped, all.kfakeOnly, all.failed = all.passed+c.passed, all.skipped+c.skipped, all.kfakeOnly+c.kfakeOnly, all.failed+c.failed
	}
	fmt.Printf("all: %d passed, %d skipped (%d kfake-only), %d failed (tests and subtests)\n", all.passed, all.skipped, all.kfakeOnly, all.failed)
	if bad {
		os.Exit(1)
	}
}
