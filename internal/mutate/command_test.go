package mutate

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"mvdan.cc/sh/v3/syntax"

	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// splitTestdata holds the command lines of the splitter's tests. In its case
// files each line of the file is one command line, with ⏎ standing for a
// newline within it.
var splitTestdata = filepath.Join("testdata", "split")

// readSplitCases returns the command lines of a case file in splitTestdata.
func readSplitCases(t testing.TB, name string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(splitTestdata, name))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for l := range strings.Lines(string(data)) {
		lines = append(lines, strings.ReplaceAll(strings.TrimSuffix(l, "\n"), "⏎", "\n"))
	}
	return lines
}

// shWords returns the words sh gives line as the arguments of a command,
// with pathname expansion off.
func shWords(t *testing.T, sh, line string) []string {
	t.Helper()
	// The line comes last, so that a comment or a trailing backslash in it
	// ends the script as it would end the line.
	script := "set -f\nwords() { for a; do printf '%s\\0' \"$a\"; done; }\nwords " + line
	cmd := exec.Command(sh, "-c", script)
	cmd.Env = []string{"LC_ALL=C"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || stderr.Len() > 0 {
		t.Fatalf("%s -c %q: %v: %s", sh, script, err, stderr.String())
	}
	words := strings.Split(string(out), "\x00")
	return words[:len(words)-1] // the last word ends in a NUL too
}

// TestSplitCommandMatchesSh splits every line of the corpus as sh does. The
// corpus holds nothing that sh would expand (an unquoted $ or backquote, a
// leading ~), where the splitter and sh part ways on purpose; glob characters
// are in it, with sh's pathname expansion off.
func TestSplitCommandMatchesSh(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatalf("the corpus is checked against a real sh: %v", err)
	}
	lines := readSplitCases(t, "corpus.txt")
	if len(lines) < 40 {
		t.Fatalf("the corpus has %d lines; keep at least 40", len(lines))
	}
	for i, line := range lines {
		t.Run(fmt.Sprintf("line%d", i+1), func(t *testing.T) {
			want := shWords(t, sh, line)
			got, err := SplitCommand(line)
			if err != nil {
				t.Fatalf("SplitCommand(%q): %v", line, err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("SplitCommand(%q) mismatch with %s (-want +got):\n%s", line, sh, diff)
			}
		})
	}
}

// TestSplitCommandRefused refuses every line of refused.txt with the message
// in refused.golden, the line's message on the same line. UPDATE_GOLDEN=1
// rewrites refused.golden. Where a message names a piece of shell syntax at
// a byte, the line has that text at that byte.
func TestSplitCommandRefused(t *testing.T) {
	lines := readSplitCases(t, "refused.txt")
	var got []string
	for _, line := range lines {
		words, err := SplitCommand(line)
		if err == nil {
			t.Errorf("SplitCommand(%q) = %q; want an error", line, words)
			continue
		}
		if !strings.HasPrefix(err.Error(), fmt.Sprintf("%q", line)) {
			t.Errorf("SplitCommand(%q): %q does not start with the line", line, err)
		}
		var syntaxErr *shellSyntaxError
		if errors.As(err, &syntaxErr) && !strings.HasPrefix(line[syntaxErr.offset:], syntaxErr.text) {
			t.Errorf("SplitCommand(%q): %q, but byte %d starts %q", line, err, syntaxErr.offset, line[syntaxErr.offset:])
		}
		got = append(got, err.Error())
	}

	golden := filepath.Join(splitTestdata, "refused.golden")
	if os.Getenv("UPDATE_GOLDEN") != "" {
		if err := os.WriteFile(golden, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want := readSplitCases(t, "refused.golden")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("messages differ from %s; UPDATE_GOLDEN=1 rewrites it (-want +got):\n%s", golden, diff)
	}
}

// TestSplitCommand covers what the sh corpus cannot: expansions, which pass
// through as written, and the bytes sh treats differently from the parser.
func TestSplitCommand(t *testing.T) {
	ran := filepath.Join(t.TempDir(), "ran")
	cases := []struct {
		name    string
		line    string
		want    []string
		wantErr string
	}{
		{name: "the flytekit sshd line", line: fixtures.SSHDLine, want: fixtures.SSHD},
		{name: "the README's worker command line", line: fixtures.WorkerCommandLine, want: fixtures.WorkerCommand},
		{name: "empty", line: "", want: []string{}},
		{name: "blanks and newlines", line: " \t\n \n", want: []string{}},
		{name: "blank lines around the command", line: "\n\n sshd -De\n\n", want: []string{"sshd", "-De"}},
		{name: "only a comment", line: "# sshd -De", want: []string{}},
		{name: "the kubelet's $(VAR)", line: "sshd -p $(SSH_PORT) -o$(OPT)", want: []string{"sshd", "-p", "$(SSH_PORT)", "-o$(OPT)"}},
		{name: "$(VAR) in double quotes", line: `prog "--dir=$(HOME)/a b"`, want: []string{"prog", "--dir=$(HOME)/a b"}},
		{name: "$(VAR) in single quotes", line: `prog '$(VAR)'`, want: []string{"prog", "$(VAR)"}},
		{name: "an escaped $(VAR) loses its backslash", line: `prog "\$(VAR)"`, want: []string{"prog", "$(VAR)"}},
		{name: "the kubelet's escape $$(VAR), quoted", line: `prog '$$(VAR)'`, want: []string{"prog", "$$(VAR)"}},
		{name: "two $(VAR) and quotes in one word", line: `prog --x=$(A)"$(B) c"'d'`, want: []string{"prog", "--x=$(A)$(B) cd"}},
		{name: "parameters", line: `prog $VAR ${VAR} ${VAR:-a b} "$1" $@ $#`, want: []string{"prog", "$VAR", "${VAR}", "${VAR:-a b}", "$1", "$@", "$#"}},
		{name: "arithmetic", line: `prog $((1 + 2))`, want: []string{"prog", "$((1 + 2))"}},
		{name: "a command substitution is not run", line: "prog $(touch " + ran + ") `touch " + ran + "`",
			want: []string{"prog", "$(touch " + ran + ")", "`touch " + ran + "`"}},
		{name: "operators within a command substitution", line: `prog "$(a; b | c)"`, want: []string{"prog", "$(a; b | c)"}},
		{name: "a leading tilde", line: `prog ~ ~/x ~root/x`, want: []string{"prog", "~", "~/x", "~root/x"}},
		{name: "globs", line: `/bin/ls * /etc/*.conf [a-z]?`, want: []string{"/bin/ls", "*", "/etc/*.conf", "[a-z]?"}},
		{name: "a NUL byte", line: "prog a\x00b", wantErr: `"prog a\x00b" has a NUL byte at byte 6; no program can receive one in an argument`},
		{name: "a carriage return", line: "sshd -De\r\n", wantErr: `"sshd -De\r\n" has a carriage return at byte 8; sh would keep it in a word, so remove it`},
		{name: "invalid UTF-8", line: "prog \xff", wantErr: `"prog \xff" is not a valid command line: byte 5: invalid UTF-8 encoding`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SplitCommand(tc.line)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("SplitCommand(%q) = %q, %v; want the error %s", tc.line, got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("SplitCommand(%q): %v", tc.line, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("SplitCommand(%q) mismatch (-want +got):\n%s", tc.line, diff)
			}
		})
	}
	if _, err := os.Stat(ran); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a command substitution ran: %s exists (%v)", ran, err)
	}
}

// TestSplitCommandConcurrent splits from several goroutines at once, as
// concurrent admission requests do: no state may be shared between calls.
func TestSplitCommandConcurrent(t *testing.T) {
	const line = `prog "a \"quoted\" word" "\$(VAR) \\ \` + "`" + `" 'x'`
	want := []string{"prog", `a "quoted" word`, "$(VAR) \\ `", "x"}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for range 500 {
				got, err := SplitCommand(line)
				if err != nil || !slices.Equal(got, want) {
					errs <- fmt.Errorf("SplitCommand(%q) = %q, %v; want %q", line, got, err, want)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// FuzzSplitCommand: any line splits into words or is refused, never a panic,
// the same way every time; the words hold no NUL byte and the program name
// is not empty; a refusal that names a piece of shell syntax names the text at
// its byte; and the words, each quoted for sh, split back into themselves.
func FuzzSplitCommand(f *testing.F) {
	f.Fuzz(func(t *testing.T, line string) {
		words, err := SplitCommand(line)
		again, errAgain := SplitCommand(line)
		if fmt.Sprint(err) != fmt.Sprint(errAgain) || !slices.Equal(words, again) {
			t.Fatalf("not deterministic: %q %v, then %q %v", words, err, again, errAgain)
		}
		if err != nil {
			var syntaxErr *shellSyntaxError
			if errors.As(err, &syntaxErr) && !strings.HasPrefix(line[syntaxErr.offset:], syntaxErr.text) {
				t.Fatalf("%v, but byte %d starts %q", err, syntaxErr.offset, line[syntaxErr.offset:])
			}
			return
		}
		if words == nil {
			t.Fatalf("SplitCommand(%q) = nil, nil; want a slice", line)
		}
		if checkErr := checkCommand(words); checkErr != nil {
			t.Fatalf("SplitCommand(%q) = %q: %v", line, words, checkErr)
		}
		quoted := make([]string, len(words))
		for i, w := range words {
			q, err := syntax.Quote(w, syntax.LangPOSIX)
			if err != nil {
				return // a word that has no POSIX quoting, such as one with a control character
			}
			quoted[i] = q
		}
		requoted := strings.Join(quoted, " ")
		back, err := SplitCommand(requoted)
		if err != nil {
			t.Fatalf("SplitCommand(%q) = %q, quoted as %q: %v", line, words, requoted, err)
		}
		if diff := cmp.Diff(words, back); diff != "" {
			t.Fatalf("SplitCommand(%q) = %q, quoted as %q, splits back differently (-first +back):\n%s", line, words, requoted, diff)
		}
	})
}

// BenchmarkSplitCommand splits the flytekit sshd line.
func BenchmarkSplitCommand(b *testing.B) {
	for b.Loop() {
		if _, err := SplitCommand(fixtures.SSHDLine); err != nil {
			b.Fatal(err)
		}
	}
}
