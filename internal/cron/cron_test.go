package cron

import (
	"errors"
	"testing"
	"time"
)

func at(s string) time.Time {
	t, err := time.Parse("2006-01-02 15:04", s)
	if err != nil {
		panic(err)
	}
	return t
}

// TestNext: the first firing strictly after a time, for each syntax.
func TestNext(t *testing.T) {
	for _, tc := range []struct {
		expr, after, want string
	}{
		{"* * * * *", "2026-03-01 10:00", "2026-03-01 10:01"},
		{"0 3 * * *", "2026-03-01 03:00", "2026-03-02 03:00"},
		{"0 3 * * *", "2026-03-01 02:59", "2026-03-01 03:00"},
		{"*/15 * * * *", "2026-03-01 10:07", "2026-03-01 10:15"},
		{"5/20 * * * *", "2026-03-01 10:46", "2026-03-01 11:05"},
		{"0 0-6/3 * * *", "2026-03-01 04:00", "2026-03-01 06:00"},
		{"30 1,13 * * *", "2026-03-01 02:00", "2026-03-01 13:30"},
		{"0 0 1 * *", "2026-01-31 12:00", "2026-02-01 00:00"},
		{"0 0 31 * *", "2026-04-01 00:00", "2026-05-31 00:00"},
		{"0 0 29 2 *", "2026-03-01 00:00", "2028-02-29 00:00"},
		{"0 12 * * SUN", "2026-03-02 00:00", "2026-03-08 12:00"}, // 2026-03-02 is a Monday
		{"0 12 * * 7", "2026-03-02 00:00", "2026-03-08 12:00"},
		{"0 12 * * mon-fri", "2026-03-07 00:00", "2026-03-09 12:00"},
		{"0 0 * JAN,jul *", "2026-02-01 00:00", "2026-07-01 00:00"},
		// Both day fields restricted: either matches (the 13th, or a Friday).
		{"0 0 13 * 5", "2026-03-01 00:00", "2026-03-06 00:00"},
		{"0 0 13 * 5", "2026-03-06 00:00", "2026-03-13 00:00"},
		// A starred day of month: only the day of week counts.
		{"0 0 */1 * 5", "2026-03-01 00:00", "2026-03-06 00:00"},
		{"59 23 31 12 *", "2026-12-31 23:59", "2027-12-31 23:59"},
	} {
		s, err := Parse(tc.expr)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.expr, err)
			continue
		}
		if got := s.Next(at(tc.after)); !got.Equal(at(tc.want)) {
			t.Errorf("%q Next(%s) = %s, want %s", tc.expr, tc.after, got.Format("2006-01-02 15:04"), tc.want)
		}
		if !s.Matches(at(tc.want)) {
			t.Errorf("%q does not match its own firing %s", tc.expr, tc.want)
		}
	}
}

// TestNextIgnoresSecondsAndZone: Next works in UTC from the next whole
// minute, whatever the zone and seconds of its argument.
func TestNextIgnoresSecondsAndZone(t *testing.T) {
	s, err := Parse("0 * * * *")
	if err != nil {
		t.Fatal(err)
	}
	zone := time.FixedZone("x", 90*60)
	from := time.Date(2026, 3, 1, 11, 59, 30, 5, zone) // 10:29:30 UTC
	if got, want := s.Next(from), time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC); !got.Equal(want) || got.Location() != time.UTC {
		t.Errorf("Next = %s, want %s", got, want)
	}
}

// TestLast: the latest firing in (after, now], whatever the span.
func TestLast(t *testing.T) {
	for _, tc := range []struct {
		expr, after, now, want string
	}{
		{"* * * * *", "2026-03-01 10:00", "2026-03-01 10:00", ""},
		{"* * * * *", "2026-03-01 10:00", "2026-03-01 10:01", "2026-03-01 10:01"},
		{"* * * * *", "2020-03-01 10:00", "2026-03-01 10:01", "2026-03-01 10:01"},
		{"0 3 * * *", "2026-03-01 03:00", "2026-03-02 02:59", ""},
		{"0 3 * * *", "2026-03-01 03:00", "2026-03-05 12:00", "2026-03-05 03:00"},
		{"0 0 1 1 *", "2020-06-01 00:00", "2026-03-01 00:00", "2026-01-01 00:00"},
		{"0 0 29 2 *", "2020-03-01 00:00", "2026-03-01 00:00", "2024-02-29 00:00"},
		{"0 0 29 2 *", "2024-02-29 00:00", "2026-03-01 00:00", ""},
		{"* * 1 * *", "2026-01-01 00:00", "2026-03-20 00:00", "2026-03-01 23:59"},
	} {
		s, err := Parse(tc.expr)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tc.expr, err)
		}
		got := s.Last(at(tc.after), at(tc.now))
		want := time.Time{}
		if tc.want != "" {
			want = at(tc.want)
		}
		if !got.Equal(want) {
			t.Errorf("%q Last(%s, %s) = %s, want %q", tc.expr, tc.after, tc.now, got, tc.want)
		}
	}
}

// TestParseRefuses: malformed and never-firing expressions are refused
// with the sentinel errors.
func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want error
	}{
		{"", ErrSyntax},
		{"* * * *", ErrSyntax},
		{"* * * * * *", ErrSyntax},
		{"@daily", ErrSyntax},
		{"60 * * * *", ErrSyntax},
		{"* 24 * * *", ErrSyntax},
		{"* * 0 * *", ErrSyntax},
		{"* * 32 * *", ErrSyntax},
		{"* * * 13 *", ErrSyntax},
		{"* * * * 8", ErrSyntax},
		{"5-1 * * * *", ErrSyntax},
		{"*/0 * * * *", ErrSyntax},
		{"*/61 * * * *", ErrSyntax},
		{"1,,2 * * * *", ErrSyntax},
		{"-1 * * * *", ErrSyntax},
		{"1-2-3 * * * *", ErrSyntax},
		{"a * * * *", ErrSyntax},
		{"* * * FOO *", ErrSyntax},
		{"* * * * SUNDAY", ErrSyntax},
		{"001 * * * *", ErrSyntax},
		{"+1 * * * *", ErrSyntax},
		{"0 0 30 2 *", ErrNeverFires},
		{"0 0 31 4,6,9,11 *", ErrNeverFires},
	} {
		_, err := Parse(tc.expr)
		if !errors.Is(err, tc.want) {
			t.Errorf("Parse(%q) = %v, want %v", tc.expr, err, tc.want)
		}
	}
	_, err := Parse("0 25 * * *")
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "hour" || fe.Text != "25" {
		t.Errorf("Parse(0 25 * * *) = %v, want a FieldError on the hour", err)
	}
}

// FuzzParse: Parse never panics, and for every schedule it accepts Next
// returns a later firing with no firing in between (checked with Last).
func FuzzParse(f *testing.F) {
	for _, s := range []string{"0 3 * * *", "*/5 1-3 1,15 * MON-FRI", "0 0 29 2 *", "0 0 13 * 5", "59 23 31 12 7"} {
		f.Add(s, int64(1772323200))
	}
	f.Fuzz(func(t *testing.T, expr string, unix int64) {
		s, err := Parse(expr)
		if err != nil {
			if !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrNeverFires) {
				t.Fatalf("Parse(%q): untyped error %v", expr, err)
			}
			return
		}
		from := time.Unix(unix%(200*365*86400), 0).UTC() // 1970..2170
		next := s.Next(from)
		if next.IsZero() {
			t.Fatalf("%q accepted but does not fire after %s", expr, from)
		}
		if !next.After(from) || next.Second() != 0 || next.Nanosecond() != 0 || !s.Matches(next) {
			t.Fatalf("%q Next(%s) = %s", expr, from, next)
		}
		if got := s.Last(from, next); !got.Equal(next) {
			t.Fatalf("%q Last(%s, %s) = %s, want the bound", expr, from, next, got)
		}
		if got := s.Last(from, next.Add(-time.Second)); !got.IsZero() {
			t.Fatalf("%q fires at %s, between %s and Next %s", expr, got, from, next)
		}
	})
}
