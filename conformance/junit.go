package conformance

import (
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"time"
)

// The JUnit XML schema most readers accept (Jenkins, GitLab, the
// junit-xml Python reader): testsuites > testsuite > testcase, with a
// failure or skipped element per testcase that did not pass.
type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Time     string       `xml:"time,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Errors   int         `xml:"errors,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Time     string      `xml:"time,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Skipped   *junitMessage `xml:"skipped,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr,omitempty"`
	Text    string `xml:",chardata"`
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.3f", d.Seconds()) }

// WriteJUnit writes the report as JUnit XML: one testsuite per capability,
// one testcase per check.
func (r *Report) WriteJUnit(w io.Writer) error {
	root := junitSuites{Name: "custody conformance: " + r.Transport.Name}
	var total time.Duration
	names, by := r.groups()
	for _, g := range names {
		s := junitSuite{Name: g}
		var d time.Duration
		for _, res := range by[g] {
			c := junitCase{Name: res.Name, Classname: "conformance." + g, Time: seconds(res.Duration), SystemOut: strings.Join(res.Log, "\n")}
			switch res.Status {
			case StatusFail:
				c.Failure = &junitMessage{Message: res.Message, Type: "conformance", Text: res.Message}
				s.Failures++
			case StatusSkip:
				c.Skipped = &junitMessage{Message: res.Message}
				s.Skipped++
			}
			s.Tests++
			d += res.Duration
			s.Cases = append(s.Cases, c)
		}
		s.Time = seconds(d)
		total += d
		root.Tests += s.Tests
		root.Failures += s.Failures
		root.Skipped += s.Skipped
		root.Suites = append(root.Suites, s)
	}
	root.Time = seconds(total)
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(root); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
