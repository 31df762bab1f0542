package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sampleInfo and sampleResults are a fixed run for the formatting tests.
var sampleInfo = runInfo{
	Date:         time.Date(2026, 3, 4, 5, 6, 7, 0, time.FixedZone("X", 3600)),
	GoVersion:    "go1.26.0",
	GOOS:         "linux",
	GOARCH:       "amd64",
	CPUs:         2,
	CPUModel:     "Intel(R) Xeon(R) Processor (family 6, model 207)",
	Backend:      "tcp",
	Ranks:        4,
	RepeatsScale: 0.25,
}

func sampleResults() []result {
	bw := 925.7e6
	return []result{
		{Workload: "allgatherv-cuts", Ranks: 4, BytesPerRank: 200_000, Repeats: 13,
			Median: 864200 * time.Nanosecond, Min: 800 * time.Microsecond, Max: time.Millisecond, AlgBytes: 800_000, AlgBW: &bw},
		{Workload: "barrier", Ranks: 4, Repeats: 50,
			Median: 213700 * time.Nanosecond, Min: 200 * time.Microsecond, Max: 300 * time.Microsecond},
	}
}

func TestWriteTable(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, writeTable(&b, sampleInfo, sampleResults()))
	want := strings.Join([]string{
		"# starbench 2026-03-04T04:06:07Z  go1.26.0 linux/amd64  cpus=2  backend=tcp  ranks=4  repeats-scale=0.25",
		"# processor: Intel(R) Xeon(R) Processor (family 6, model 207)",
		"workload          ranks  bytes/rank repeats      median        algbw",
		"allgatherv-cuts       4      200 KB      13    864.2 µs   925.7 MB/s",
		"barrier               4           -      50    213.7 µs            -",
		"",
	}, "\n")
	assert.Equal(t, want, b.String())
}

func TestWriteJSON(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, writeJSON(&b, sampleInfo, sampleResults()))
	var doc map[string]any
	require.NoError(t, json.Unmarshal(b.Bytes(), &doc), b.String())
	assert.Equal(t, "2026-03-04T04:06:07Z", doc["date"])
	assert.Equal(t, "go1.26.0", doc["go"])
	assert.Equal(t, "linux", doc["goos"])
	assert.Equal(t, "amd64", doc["goarch"])
	assert.Equal(t, 4.0, doc["ranks"])
	assert.Equal(t, "tcp", doc["backend"])
	assert.Equal(t, 2.0, doc["cpus"])
	assert.Equal(t, "Intel(R) Xeon(R) Processor (family 6, model 207)", doc["cpu_model"])
	assert.Equal(t, 0.25, doc["repeats_scale"])
	results, ok := doc["results"].([]any)
	require.True(t, ok)
	require.Len(t, results, 2)
	assert.Equal(t, map[string]any{
		"workload": "allgatherv-cuts", "ranks": 4.0, "bytes_per_rank": 200000.0, "repeats": 13.0,
		"median_ns": 864200.0, "min_ns": 800000.0, "max_ns": 1e6, "alg_bytes": 800000.0, "algbw_bytes_per_sec": 925.7e6,
	}, results[0])
	barrier := results[1].(map[string]any)
	assert.Contains(t, barrier, "algbw_bytes_per_sec")
	assert.Nil(t, barrier["algbw_bytes_per_sec"], "barrier has no bandwidth: null")

	// The document decodes back into the results it came from.
	var back report
	require.NoError(t, json.Unmarshal(b.Bytes(), &back))
	assert.Equal(t, sampleResults(), back.Results)
}

func TestWriteJSONNoResults(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, writeJSON(&b, sampleInfo, nil))
	assert.Contains(t, b.String(), `"results": []`)
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0:          "-",
		32:         "32 B",
		999:        "999 B",
		1024:       "1 KiB",
		10_240:     "10 KiB",
		200_000:    "200 KB",
		1500:       "1.5 KiB",
		2_097_152:  "2 MiB",
		16 << 20:   "16 MiB",
		25_897_184: "24.7 MiB",
	} {
		assert.Equal(t, want, humanBytes(n), "%d bytes", n)
	}
}

func TestHumanDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		999:                     "999 ns",
		1500:                    "1.5 µs",
		864200:                  "864.2 µs",
		8654321:                 "8.65 ms",
		111390000:               "111.39 ms",
		1234567890:              "1.235 s",
		75 * time.Second:        "75.000 s",
		time.Millisecond - 1000: "999.0 µs",
	} {
		assert.Equal(t, want, humanDuration(d), "%d ns", int64(d))
	}
}

func TestHumanRate(t *testing.T) {
	for bps, want := range map[float64]string{
		12:      "12 B/s",
		169.2e3: "169.2 KB/s",
		925.7e6: "925.7 MB/s",
		3.21e9:  "3.21 GB/s",
	} {
		assert.Equal(t, want, humanRate(bps), "%g B/s", bps)
	}
}
