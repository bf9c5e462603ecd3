// Package cron parses five-field cron expressions (minute, hour, day of
// month, month, day of week) and finds the times they name, in UTC.
//
// Each field is a comma-separated list of items; an item is `*`, a value,
// a range `a-b`, and any of those followed by a step `/s` (`n/s` means
// `n-max/s`). Months may be written JAN..DEC and days of the week SUN..SAT
// (case-insensitive); day of week 0 and 7 are both Sunday. As in Vixie
// cron, when both the day-of-month and the day-of-week field are
// restricted (neither starts with `*`), a day matches when either does;
// otherwise both must.
package cron

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrSyntax is wrapped by every error Parse returns for a malformed
// expression.
var ErrSyntax = errors.New("invalid cron expression")

// ErrNeverFires is returned by Parse for a well-formed expression that
// names no time at all (such as 30 February).
var ErrNeverFires = errors.New("cron expression never fires")

// FieldError is a malformed field of an expression; it wraps ErrSyntax.
type FieldError struct {
	// Field is the field's name (minute, hour, day of month, month, day
	// of week).
	Field string
	// Text is the field as written.
	Text string
	// Reason says what is wrong.
	Reason string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%s field %q: %s", e.Field, e.Text, e.Reason)
}

// Unwrap returns ErrSyntax.
func (e *FieldError) Unwrap() error { return ErrSyntax }

// Schedule is a parsed expression. The zero Schedule never fires; use
// Parse.
type Schedule struct {
	minute, hour, dom, month, dow uint64
	// domStar and dowStar record a day field starting with `*`, which
	// makes the two day fields combine by "and" instead of "or".
	domStar, dowStar bool
}

// field is the description of one of the five fields.
type field struct {
	name   string
	lo, hi int
	names  []string // names[i] is value lo+i, when the field has names
}

// Parse parses a five-field expression. Errors wrap ErrSyntax (a
// *FieldError for a bad field) or are ErrNeverFires.
func Parse(expr string) (Schedule, error) {
	fields := strings.Fields(expr)
	if len(fields) != 5 {
		return Schedule{}, fmt.Errorf("%w: %q has %d fields, want 5 (minute hour day-of-month month day-of-week)", ErrSyntax, expr, len(fields))
	}
	specs := [5]field{
		{name: "minute", lo: 0, hi: 59},
		{name: "hour", lo: 0, hi: 23},
		{name: "day of month", lo: 1, hi: 31},
		{name: "month", lo: 1, hi: 12, names: []string{"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"}},
		{name: "day of week", lo: 0, hi: 7, names: []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}},
	}
	var sets [5]uint64
	for i, f := range specs {
		set, err := parseField(fields[i], f)
		if err != nil {
			return Schedule{}, err
		}
		sets[i] = set
	}
	if sets[4]&(1<<7) != 0 { // 7 is Sunday too
		sets[4] = sets[4]&^(1<<7) | 1
	}
	s := Schedule{minute: sets[0], hour: sets[1], dom: sets[2], month: sets[3], dow: sets[4],
		domStar: fields[2][0] == '*', dowStar: fields[4][0] == '*'}
	if s.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return Schedule{}, fmt.Errorf("%w: %q", ErrNeverFires, expr)
	}
	return s, nil
}

// parseField returns the set of values (bit v for value v) a field names.
func parseField(text string, f field) (uint64, error) {
	bad := func(format string, args ...any) error {
		return &FieldError{Field: f.name, Text: text, Reason: fmt.Sprintf(format, args...)}
	}
	var set uint64
	for _, item := range strings.Split(text, ",") {
		rng, stepText, hasStep := strings.Cut(item, "/")
		step := 1
		if hasStep {
			n, ok := number(stepText)
			if !ok || n < 1 || n > f.hi-f.lo+1 {
				return 0, bad("step %q is not a number from 1 to %d", stepText, f.hi-f.lo+1)
			}
			step = n
		}
		var a, b int
		switch {
		case rng == "*":
			a, b = f.lo, f.hi
			if f.names != nil && f.hi == 7 {
				b = 6 // `*` in day of week: 0-6, 7 is an alias
			}
		case strings.Contains(rng, "-"):
			from, to, _ := strings.Cut(rng, "-")
			var ok1, ok2 bool
			a, ok1 = f.value(from)
			b, ok2 = f.value(to)
			if !ok1 || !ok2 {
				return 0, bad("range %q: values are %d-%d%s", rng, f.lo, f.hi, f.nameHint())
			}
			if a > b {
				return 0, bad("range %q runs backwards", rng)
			}
		default:
			var ok bool
			a, ok = f.value(rng)
			if !ok {
				return 0, bad("%q is not a value from %d to %d%s", rng, f.lo, f.hi, f.nameHint())
			}
			b = a
			if hasStep {
				b = f.hi
			}
		}
		for v := a; v <= b; v += step {
			set |= 1 << uint(v)
		}
	}
	return set, nil
}

// value parses one value of f: a number in range or a name.
func (f field) value(s string) (int, bool) {
	if n, ok := number(s); ok {
		return n, n >= f.lo && n <= f.hi
	}
	for i, name := range f.names {
		if strings.EqualFold(s, name) {
			return f.lo + i, true
		}
	}
	return 0, false
}

func (f field) nameHint() string {
	if f.names == nil {
		return ""
	}
	return " or a name " + strings.ToUpper(f.names[0]) + ".." + strings.ToUpper(f.names[len(f.names)-1])
}

// number parses one or two decimal digits.
func number(s string) (int, bool) {
	if len(s) == 0 || len(s) > 2 {
		return 0, false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

// Matches reports whether the minute of t (in UTC) is one the schedule
// names.
func (s Schedule) Matches(t time.Time) bool {
	t = t.UTC()
	return s.month&(1<<uint(t.Month())) != 0 && s.dayMatches(t) &&
		s.hour&(1<<uint(t.Hour())) != 0 && s.minute&(1<<uint(t.Minute())) != 0
}

func (s Schedule) dayMatches(t time.Time) bool {
	dom := s.dom&(1<<uint(t.Day())) != 0
	dow := s.dow&(1<<uint(t.Weekday())) != 0
	if s.domStar || s.dowStar {
		return dom && dow
	}
	return dom || dow
}

// searchYears bounds Next's search: every schedule that fires at all
// fires within any 8 consecutive years (29 February is the rarest day).
const searchYears = 10

// Next returns the first time the schedule fires strictly after t: a
// whole minute, in UTC. It returns the zero time when the schedule does
// not fire within searchYears (a Schedule from Parse always does).
func (s Schedule) Next(t time.Time) time.Time {
	t = t.UTC().Truncate(time.Minute).Add(time.Minute)
	limit := t.Year() + searchYears
	for t.Year() <= limit {
		switch {
		case s.month&(1<<uint(t.Month())) == 0:
			t = time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, time.UTC)
		case !s.dayMatches(t):
			t = time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, time.UTC)
		case s.hour&(1<<uint(t.Hour())) == 0:
			t = t.Truncate(time.Hour).Add(time.Hour)
		case s.minute&(1<<uint(t.Minute())) == 0:
			t = t.Add(time.Minute)
		default:
			return t
		}
	}
	return time.Time{}
}

// Last returns the latest time the schedule fires in (after, now], or the
// zero time when it does not fire in that span.
func (s Schedule) Last(after, now time.Time) time.Time {
	if !now.After(after) {
		return time.Time{}
	}
	// Search back from now over growing spans, so a frequent schedule is
	// never walked over a long one: a span is widened only when the
	// shorter one held no firing.
	windows := [...]time.Duration{time.Hour, 24 * time.Hour, 32 * 24 * time.Hour, 367 * 24 * time.Hour, searchYears * 367 * 24 * time.Hour}
	for _, w := range windows {
		start := now.Add(-w)
		if !start.After(after) {
			start = after
		}
		var last time.Time
		for t := s.Next(start); !t.IsZero() && !t.After(now); t = s.Next(t) {
			last = t
		}
		if !last.IsZero() || start.Equal(after) {
			return last
		}
	}
	return time.Time{}
}
