package mutate

import (
	"errors"
	"fmt"
	"strings"

	"github.com/mattn/go-shellwords"
)

// SplitCommand splits a command line into words as a POSIX shell would:
// quotes and backslashes group, runs of blanks separate, nothing is expanded
// ($(VAR) stays for the kubelet to expand). Shell operators such as ; | & < >
// are refused, since no shell runs the worker command.
func SplitCommand(line string) ([]string, error) {
	parser := shellwords.NewParser() // ParseEnv and ParseBacktick stay off: no expansion
	words, err := parser.Parse(line)
	if err != nil {
		return nil, fmt.Errorf("%q is not a valid command line (an unterminated quote or an unquoted parenthesis): %w", line, err)
	}
	if parser.Position >= 0 {
		return nil, fmt.Errorf("%q has the shell operator %q at byte %d; no shell runs the worker command, so quote it",
			line, line[parser.Position], parser.Position)
	}
	if err := checkCommand(words); err != nil {
		return nil, fmt.Errorf("%q: %w", line, err)
	}
	return words, nil
}

// checkCommand refuses a command that no container runtime can start.
func checkCommand(words []string) error {
	if len(words) > 0 && words[0] == "" {
		return errors.New("the program name (the first word) is empty")
	}
	for i, w := range words {
		if strings.IndexByte(w, 0) >= 0 {
			return fmt.Errorf("word %d contains a NUL byte", i)
		}
	}
	return nil
}
