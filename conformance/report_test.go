package conformance_test

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/conformance"
	"github.com/custody-dev/custody/sdk"
)

// The JUnit schema as standard readers parse it, declared independently of
// the writer's types.
type junitDoc struct {
	XMLName  xml.Name `xml:"testsuites"`
	Tests    int      `xml:"tests,attr"`
	Failures int      `xml:"failures,attr"`
	Skipped  int      `xml:"skipped,attr"`
	Suites   []struct {
		Name     string `xml:"name,attr"`
		Tests    int    `xml:"tests,attr"`
		Failures int    `xml:"failures,attr"`
		Skipped  int    `xml:"skipped,attr"`
		Time     string `xml:"time,attr"`
		Cases    []struct {
			Name      string `xml:"name,attr"`
			Classname string `xml:"classname,attr"`
			Time      string `xml:"time,attr"`
			Failure   *struct {
				Message string `xml:"message,attr"`
				Text    string `xml:",chardata"`
			} `xml:"failure"`
			Skipped *struct {
				Message string `xml:"message,attr"`
			} `xml:"skipped"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

func sampleReport() *conformance.Report {
	return &conformance.Report{
		Transport: sdk.Description{Name: "fake", Version: "1.0.0", ContractMajor: 1},
		Params:    map[string]string{"misbehave": "release-running"},
		Results: []conformance.Result{
			{Name: "contract/describe", Group: "contract", Status: conformance.StatusPass, Duration: 1500 * time.Millisecond},
			{Name: "contract/release-running-busy", Group: "contract", Status: conformance.StatusFail,
				Message: "Release returned OK <while> \"running\" & \x01 moving\nsecond line", Log: []string{"FAIL: x"}},
			{Name: "peer-loss/bounded", Group: "peer-loss", Status: conformance.StatusSkip, Message: "cannot kill"},
		},
	}
}

// TestWriteJUnitIsStandard: the JUnit output parses with encoding/xml into
// the standard testsuites > testsuite > testcase shape, with failure and
// skipped elements and consistent counts, whatever the messages contain.
func TestWriteJUnitIsStandard(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, sampleReport().WriteJUnit(&buf))
	require.True(t, strings.HasPrefix(buf.String(), xml.Header))
	var doc junitDoc
	require.NoError(t, xml.Unmarshal(buf.Bytes(), &doc), buf.String())
	assert.Equal(t, 3, doc.Tests)
	assert.Equal(t, 1, doc.Failures)
	assert.Equal(t, 1, doc.Skipped)
	require.Len(t, doc.Suites, 2)
	contract, loss := doc.Suites[0], doc.Suites[1]
	assert.Equal(t, "contract", contract.Name)
	assert.Equal(t, 2, contract.Tests)
	assert.Equal(t, 1, contract.Failures)
	assert.Equal(t, "1.500", contract.Time)
	require.Len(t, contract.Cases, 2)
	assert.Equal(t, "contract/describe", contract.Cases[0].Name)
	assert.Equal(t, "conformance.contract", contract.Cases[0].Classname)
	assert.Nil(t, contract.Cases[0].Failure)
	assert.Nil(t, contract.Cases[0].Skipped)
	require.NotNil(t, contract.Cases[1].Failure)
	assert.Contains(t, contract.Cases[1].Failure.Message, `<while> "running" &`)
	assert.Equal(t, "peer-loss", loss.Name)
	require.Len(t, loss.Cases, 1)
	require.NotNil(t, loss.Cases[0].Skipped)
	assert.Equal(t, "cannot kill", loss.Cases[0].Skipped.Message)
}

// TestWriteJSONRoundTrips: the JSON report decodes back to the same results.
func TestWriteJSONRoundTrips(t *testing.T) {
	rep := sampleReport()
	var buf bytes.Buffer
	require.NoError(t, rep.WriteJSON(&buf))
	var back conformance.Report
	require.NoError(t, json.Unmarshal(buf.Bytes(), &back))
	assert.Equal(t, rep.Results[1].Name, back.Results[1].Name)
	assert.Equal(t, conformance.StatusFail, back.Results[1].Status)
	assert.Equal(t, rep.Params, back.Params)
}

// TestWriteTable: one section per capability, each check with its status,
// the first line of a failure, and the totals.
func TestWriteTable(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, sampleReport().WriteTable(&buf))
	out := buf.String()
	for _, want := range []string{
		"transport fake 1.0.0 (contract 1.0), params misbehave=release-running",
		"\ncontract\n", "\npeer-loss\n",
		"PASS  contract/describe",
		"FAIL  contract/release-running-busy",
		"SKIP  peer-loss/bounded",
		"cannot kill",
		"total: 3 checks, 1 passed, 1 skipped, 1 failed",
	} {
		assert.Contains(t, out, want)
	}
	assert.NotContains(t, out, "second line")
	p, s, f := sampleReport().Counts()
	assert.Equal(t, [3]int{1, 1, 1}, [3]int{p, s, f})
	assert.True(t, sampleReport().Failed())
}
