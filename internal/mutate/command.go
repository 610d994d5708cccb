package mutate

import (
	"errors"
	"fmt"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// SplitCommand splits a command line into words as a POSIX shell would split
// the arguments of one simple command: quotes and backslashes group, runs of
// blanks separate, a backslash-newline joins lines and an unquoted # starts a
// comment. Nothing is expanded: $(VAR), which the kubelet expands later,
// $VAR, ${VAR}, $((1+2)), `cmd`, ~ and the glob characters * ? [ stay as
// written, with the quotes around them removed. No shell runs the worker
// command, so anything that only a shell would act on is refused with its
// byte offset: the operators ; & | && || ( ) and a newline that starts a
// second command, redirections such as > f and 2>&1, reserved words such as
// if, { and ! at the start of the command, and variable assignments before
// the program name. So are a NUL byte, a carriage return and invalid UTF-8.
// A line with no words (empty, blank or only a comment) gives an empty slice
// and no error.
func SplitCommand(line string) ([]string, error) {
	// The parser drops NUL bytes and treats a carriage return as a blank,
	// where sh keeps a carriage return in the word: refuse both rather
	// than split differently from sh.
	if i := strings.IndexByte(line, 0); i >= 0 {
		return nil, fmt.Errorf("%s has a NUL byte at byte %d; no program can receive one in an argument", quote(line), i)
	}
	if i := strings.IndexByte(line, '\r'); i >= 0 {
		return nil, fmt.Errorf("%s has a carriage return at byte %d; sh would keep it in a word, so remove it", quote(line), i)
	}
	file, err := parse(line)
	if err != nil {
		return nil, err
	}
	if err := firstShellSyntax(line, file.Stmts); err != nil {
		return nil, err
	}
	words := []string{}
	if len(file.Stmts) == 1 {
		for _, w := range file.Stmts[0].Cmd.(*syntax.CallExpr).Args {
			words = append(words, unquote(line, w))
		}
	}
	if err := checkCommand(words); err != nil {
		return nil, fmt.Errorf("%s: %w", quote(line), err)
	}
	return words, nil
}

// parse parses line as a POSIX shell program.
func parse(line string) (*syntax.File, error) {
	// In POSIX mode the parser follows the grammar of sh, not of bash: no
	// $'...', no [[ ]], no function keyword.
	opts := []syntax.ParserOption{syntax.Variant(syntax.LangPOSIX)}
	// The parser lets a backslash-newline continue a comment, where sh ends
	// the comment at the newline. Where one may, blank out the comment as
	// sh reads it, which changes nothing for sh and keeps every byte offset,
	// and parse again.
	mayContinueComment := strings.Contains(line, "\\\n") && strings.Contains(line, "#")
	if mayContinueComment {
		opts = append(opts, syntax.KeepComments(true))
	}
	src := line
	for {
		file, err := syntax.NewParser(opts...).Parse(strings.NewReader(src), "")
		if err != nil {
			return nil, parseError(line, src, err)
		}
		if !mayContinueComment {
			return file, nil
		}
		start, end := continuedComment(src, file)
		if start < 0 {
			return file, nil
		}
		src = src[:start] + strings.Repeat(" ", end-start) + src[end:]
	}
}

// continuedComment returns the first comment in file that ends in a
// backslash before a newline, from its # to the newline, or -1, -1.
func continuedComment(src string, file *syntax.File) (start, end int) {
	start, end = -1, -1
	syntax.Walk(file, func(node syntax.Node) bool {
		if c, ok := node.(*syntax.Comment); ok {
			hash := int(c.Hash.Offset())
			if nl := strings.IndexByte(src[hash:], '\n'); nl > 0 && src[hash+nl-1] == '\\' && (start < 0 || hash < start) {
				start, end = hash, hash+nl
			}
		}
		return true
	})
	return start, end
}

// shellSyntaxError refuses a piece of a command line that only a shell acts on.
type shellSyntaxError struct {
	line   string
	kind   string // one of the kind constants
	text   string // as written in the line
	offset int    // byte offset of text in the line
}

// The kinds of shell syntax a worker command line may not hold.
const (
	kindOperator    = "shell operator"
	kindRedirection = "redirection"
	kindReserved    = "reserved word"
	kindFunction    = "function definition"
	kindAssignment  = "variable assignment"
)

func (e *shellSyntaxError) Error() string {
	advice := "no shell runs the worker command, so quote it"
	switch {
	case e.kind == kindAssignment:
		advice = "no shell runs the worker command, so set the variable in the container's env, or start the command with env"
	case e.text == "\n":
		advice = "no shell runs the worker command, so quote the newline, or end the line with a backslash to continue it"
	}
	return fmt.Sprintf("%s has the %s %s at byte %d; %s", quote(e.line), e.kind, quote(e.text), e.offset, advice)
}

// firstShellSyntax returns the first piece of shell syntax in the parsed
// line beyond one simple command made of words, or nil if there is none.
func firstShellSyntax(line string, stmts []*syntax.Stmt) *shellSyntaxError {
	found := func(kind, text string, offset int) *shellSyntaxError {
		return &shellSyntaxError{line: line, kind: kind, text: text, offset: offset}
	}
	for i, stmt := range stmts {
		if err := stmtSyntax(line, stmt); err != nil {
			return err
		}
		if stmt.Semicolon.IsValid() { // ';' or, for stmt.Background, '&'
			off := int(stmt.Semicolon.Offset())
			return found(kindOperator, line[off:off+1], off)
		}
		if i+1 < len(stmts) { // only a newline separates two statements
			return found(kindOperator, "\n", separatingNewline(line, int(stmt.End().Offset())))
		}
	}
	return nil
}

// stmtSyntax returns the first piece of shell syntax within one statement,
// ignoring how it ends, or nil if the statement is a simple command of words.
func stmtSyntax(line string, stmt *syntax.Stmt) *shellSyntaxError {
	var first *shellSyntaxError
	found := func(kind, text string, offset int) {
		if first == nil || offset < first.offset {
			first = &shellSyntaxError{line: line, kind: kind, text: text, offset: offset}
		}
	}
	if stmt.Negated {
		found(kindReserved, "!", int(stmt.Position.Offset()))
	}
	// A redirection may come anywhere in a command, even before the program.
	for _, r := range stmt.Redirs {
		// Up to the redirection's word: a here-document's body says no more.
		found(kindRedirection, line[r.Pos().Offset():r.Word.End().Offset()], int(r.Pos().Offset()))
	}
	switch cmd := stmt.Cmd.(type) {
	case *syntax.CallExpr:
		if len(cmd.Assigns) > 0 {
			a := cmd.Assigns[0]
			found(kindAssignment, source(line, a), int(a.Pos().Offset()))
		}
	case *syntax.BinaryCmd: // a && b, a || b, a | b
		if err := stmtSyntax(line, cmd.X); err != nil {
			found(err.kind, err.text, err.offset)
		} else {
			found(kindOperator, cmd.Op.String(), int(cmd.OpPos.Offset()))
		}
	case *syntax.Subshell:
		found(kindOperator, "(", int(cmd.Lparen.Offset()))
	case *syntax.FuncDecl: // name() body
		found(kindFunction, strings.TrimRight(line[cmd.Pos().Offset():cmd.Body.Pos().Offset()], " \t\n\\"),
			int(cmd.Pos().Offset()))
	case nil: // only redirections, such as "> f"
	default: // { }, if, while, until, for, case: each starts with its reserved word
		off := int(cmd.Pos().Offset())
		end := off + 1
		for end < len(line) && 'a' <= line[end] && line[end] <= 'z' {
			end++
		}
		found(kindReserved, line[off:end], off)
	}
	return first
}

// separatingNewline returns the offset of the first newline at or after
// from that ends a command: not one escaped by a backslash, which joins two
// lines. Between two statements there are only blanks, backslash-newlines,
// comments and newlines.
func separatingNewline(line string, from int) int {
	for i := from; i < len(line); i++ {
		switch line[i] {
		case '\\':
			i++ // skip the escaped newline
		case '#': // a comment runs to the newline
			nl := strings.IndexByte(line[i:], '\n')
			if nl < 0 {
				return len(line)
			}
			return i + nl
		case '\n':
			return i
		}
	}
	return len(line) // not reached: the parser saw a newline here
}

// unquote removes the quotes from a word as sh's quote removal does, and
// copies every expansion in it as written, so that nothing is expanded. (The
// expand package cannot do this: its Fields expands braces and a leading ~,
// and its Literal keeps the backslashes of an unquoted word.)
func unquote(line string, w *syntax.Word) string {
	var sb strings.Builder
	for _, part := range w.Parts {
		switch part := part.(type) {
		case *syntax.Lit:
			unescape(&sb, part.Value, "") // outside quotes a backslash quotes any character
		case *syntax.SglQuoted:
			sb.WriteString(part.Value)
		case *syntax.DblQuoted:
			for _, inner := range part.Parts {
				if lit, ok := inner.(*syntax.Lit); ok {
					unescape(&sb, lit.Value, "$`\"\\")
				} else {
					sb.WriteString(source(line, inner))
				}
			}
		default: // $VAR, ${VAR}, $(VAR), `cmd`, $((1+2))
			sb.WriteString(source(line, part))
		}
	}
	return sb.String()
}

// unescape writes s to sb without the backslashes that quote a character:
// each one outside double quotes (special is empty), only those before a
// character of special within them. A backslash-newline is a line
// continuation, which the parser removes, except after an escaped backslash
// (\\\<newline>): it is removed here. A trailing backslash stays.
func unescape(sb *strings.Builder, s, special string) {
	for {
		i := strings.IndexByte(s, '\\')
		if i < 0 || i == len(s)-1 {
			break
		}
		sb.WriteString(s[:i])
		switch c := s[i+1]; {
		case c == '\n':
		case special == "" || strings.IndexByte(special, c) >= 0:
			sb.WriteByte(c) // the rest of a multi-byte character follows unchanged
		default:
			sb.WriteString(s[i : i+2])
		}
		s = s[i+2:]
	}
	sb.WriteString(s)
}

// source returns a node's text as written in the line.
func source(line string, n syntax.Node) string {
	return line[n.Pos().Offset():n.End().Offset()]
}

// posixOperators are the operators of the POSIX shell grammar, longest first,
// for naming the one a parse error points at.
var posixOperators = []string{"<<-", "&&", "||", ";;", "<<", ">>", "<&", ">&", "<>", ">|", ";", "&", "|", "(", ")", "<", ">"}

// parseError explains why the parser refused the line: the first operator
// that is not a word, or else the parser's own message.
func parseError(line, src string, err error) error {
	// Reading the line as a plain list of words stops at the first operator,
	// where parsing it as a program may have stopped later, at the
	// construct the operator left incomplete.
	for _, wordErr := range syntax.NewParser(syntax.Variant(syntax.LangPOSIX)).WordsSeq(strings.NewReader(src)) {
		var pe syntax.ParseError
		if errors.As(wordErr, &pe) {
			off := int(pe.Pos.Offset())
			for _, op := range posixOperators {
				if strings.HasPrefix(src[off:], op) {
					kind := kindOperator
					if strings.ContainsAny(op, "<>") {
						kind = kindRedirection
					}
					return &shellSyntaxError{line: line, kind: kind, text: op, offset: off}
				}
			}
		}
	}
	var pos syntax.Pos
	var pe syntax.ParseError
	var le syntax.LangError
	switch {
	case errors.As(err, &pe):
		pos = pe.Pos
		if opener := unclosed(src[pos.Offset():]); pe.Incomplete && opener != "" {
			return fmt.Errorf("%s is not a valid command line: the %s at byte %d is never closed", quote(line), opener, pos.Offset())
		}
	case errors.As(err, &le):
		pos = le.Pos
	default:
		return fmt.Errorf("%s is not a valid command line: %w", quote(line), err)
	}
	msg := strings.TrimPrefix(err.Error(), pos.String()+": ")
	return fmt.Errorf("%s is not a valid command line: byte %d: %s", quote(line), pos.Offset(), msg)
}

// unclosed names the quote or the expansion that rest starts with, if any.
func unclosed(rest string) string {
	for _, o := range []struct{ prefix, name string }{
		{"'", "single quote"}, {`"`, "double quote"}, {"`", "backquote"},
		{"$((", `"$(("`}, {"$(", `"$("`}, {"${", `"${"`},
	} {
		if strings.HasPrefix(rest, o.prefix) {
			return o.name
		}
	}
	return ""
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
