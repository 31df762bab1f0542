package comm_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/starcomm/starcomm/comm"
)

// TestCheckAllgathervMessages: CheckAllgatherv's errors name the index and
// value at fault, in this order: a negative count or displacement before
// the length of send (which a negative count could never match), and a
// region whose end overflows an int as such, not as a wrapped-around
// length; no message has a doubled parenthesis.
func TestCheckAllgathervMessages(t *testing.T) {
	const maxInt = math.MaxInt
	type want struct {
		msg  string
		size bool // an *InvalidBufferSizeError, else an *InvalidArgumentError
	}
	cases := []struct {
		name         string
		rank         int
		send, recv   int // lengths, in float64 elements
		counts       []int
		displs       []int
		want         want
		wantExpected int // the InvalidBufferSizeError's Expected
	}{
		{name: "counts=negative/own", rank: 0, send: 0, recv: 4, counts: []int{-1, 2}, displs: []int{0, 2},
			want: want{msg: "comm: allgatherv: invalid argument: counts[0] = -1 is negative"}},
		{name: "counts=negative/other", rank: 0, send: 2, recv: 4, counts: []int{2, -3}, displs: []int{0, 2},
			want: want{msg: "comm: allgatherv: invalid argument: counts[1] = -3 is negative"}},
		{name: "counts=negative/send-length-wrong-too", rank: 1, send: 5, recv: 4, counts: []int{2, -1}, displs: []int{0, 2},
			want: want{msg: "comm: allgatherv: invalid argument: counts[1] = -1 is negative"}},
		{name: "displs=negative", rank: 0, send: 1, recv: 4, counts: []int{2, 2}, displs: []int{0, -2},
			want: want{msg: "comm: allgatherv: invalid argument: displs[1] = -2 is negative"}},
		{name: "displs=negative/send-length-wrong-too", rank: 0, send: 1, recv: 4, counts: []int{2, 2}, displs: []int{-1, 2},
			want: want{msg: "comm: allgatherv: invalid argument: displs[0] = -1 is negative"}},
		{name: "displs=maxint/count=1", rank: 0, send: 1, recv: 3, counts: []int{1, 1}, displs: []int{0, maxInt},
			want: want{msg: "comm: allgatherv: invalid argument: rank 1's region in recv, displs[1] = 9223372036854775807 plus counts[1] = 1, ends beyond the largest int"}},
		{name: "displs=maxint/count=maxint", rank: 1, send: 0, recv: 3, counts: []int{maxInt, 0}, displs: []int{maxInt, 0},
			want: want{msg: "comm: allgatherv: invalid argument: rank 0's region in recv, displs[0] = 9223372036854775807 plus counts[0] = 9223372036854775807, ends beyond the largest int"}},
		{name: "displs=maxint/count=0", rank: 0, send: 1, recv: 3, counts: []int{1, 0}, displs: []int{0, maxInt},
			want:         want{size: true, msg: "comm: allgatherv: invalid buffer size (recv too small for rank 1's region, displs[1] = 9223372036854775807 plus counts[1] = 0): expected 9223372036854775807 elements, got 3"},
			wantExpected: maxInt},
		{name: "recv=too-small", rank: 0, send: 3, recv: 7, counts: []int{3, 5}, displs: []int{0, 3},
			want:         want{size: true, msg: "comm: allgatherv: invalid buffer size (recv too small for rank 1's region, displs[1] = 3 plus counts[1] = 5): expected 8 elements, got 7"},
			wantExpected: 8},
		{name: "send=wrong-length", rank: 1, send: 4, recv: 8, counts: []int{3, 5}, displs: []int{0, 3},
			want:         want{size: true, msg: "comm: allgatherv: invalid buffer size (len(send) must equal counts[1]): expected 5 elements, got 4"},
			wantExpected: 5},
		{name: "send=wrong-length/one-expected", rank: 1, send: 0, recv: 4, counts: []int{3, 1}, displs: []int{0, 3},
			want:         want{size: true, msg: "comm: allgatherv: invalid buffer size (len(send) must equal counts[1]): expected 1 element, got 0"},
			wantExpected: 1},
		{name: "regions=overlap", rank: 0, send: 2, recv: 4, counts: []int{2, 2}, displs: []int{1, 0},
			want: want{msg: "comm: allgatherv: invalid argument: recv regions of rank 0 [1, 3) and rank 1 [0, 2) overlap"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			send, recv := make([]float64, tc.send), make([]float64, tc.recv)
			_, err := comm.CheckAllgatherv(tc.rank, len(tc.counts), comm.ViewOf(send), comm.ViewOf(recv), tc.counts, tc.displs)
			if err == nil {
				t.Fatalf("no error, want %q", tc.want.msg)
			}
			if got := err.Error(); got != tc.want.msg {
				t.Errorf("error\n got %q\nwant %q", got, tc.want.msg)
			}
			var bs *comm.InvalidBufferSizeError
			var ia *comm.InvalidArgumentError
			switch {
			case tc.want.size && !errors.As(err, &bs):
				t.Errorf("error is a %T, want an *InvalidBufferSizeError", err)
			case tc.want.size && bs.Expected != tc.wantExpected:
				t.Errorf("Expected = %d, want %d", bs.Expected, tc.wantExpected)
			case !tc.want.size && !errors.As(err, &ia):
				t.Errorf("error is a %T, want an *InvalidArgumentError", err)
			}
		})
	}
}

// TestCheckAllgathervTotal: valid arguments give the total count, whatever
// the order of the regions, up to a region that ends at recv's end.
func TestCheckAllgathervTotal(t *testing.T) {
	recv := make([]int32, 10)
	total, err := comm.CheckAllgatherv(1, 3, comm.ViewOf(make([]int32, 4)), comm.ViewOf(recv), []int{3, 4, 0}, []int{6, 2, 10})
	if err != nil || total != 7 {
		t.Fatalf("CheckAllgatherv = %d, %v; want 7, nil", total, err)
	}
}

// TestCheckOverlap: send and recv are separate memory, or in place exactly
// (allreduce: the same slice; allgatherv: send is this rank's region of
// recv); any other sharing is an InvalidArgumentError (a backend that
// writes recv while it still reads send would return wrong data).
func TestCheckOverlap(t *testing.T) {
	big := make([]float64, 11)
	v := comm.ViewOf[float64]
	isArg := func(t *testing.T, err error, want string) {
		t.Helper()
		var ia *comm.InvalidArgumentError
		if !errors.As(err, &ia) || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want an InvalidArgumentError saying %q", err, want)
		}
	}
	type pair struct{ send, recv []float64 }
	for name, p := range map[string]pair{
		"separate": {big[:5], big[5:10]}, "same": {big[:10], big[:10]}, "adjacent": {big[5:10], big[:5]},
	} {
		if err := comm.CheckAllreduce(v(p.send), v(p.recv), comm.Sum); err != nil {
			t.Errorf("allreduce/%s: %v", name, err)
		}
	}
	for name, p := range map[string]pair{"shifted": {big[:10], big[1:11]}, "shifted-back": {big[1:11], big[:10]}} {
		t.Run("allreduce/"+name, func(t *testing.T) {
			isArg(t, comm.CheckAllreduce(v(p.send), v(p.recv), comm.Max), "send and recv overlap without being the same buffer")
		})
	}
	// Allgatherv, 2 ranks: regions [0,4) and [4,10) of recv = big[:10].
	counts, displs := []int{4, 6}, []int{0, 4}
	recv := big[:10]
	type call struct {
		rank int
		send []float64
	}
	for name, c := range map[string]call{
		"separate": {1, make([]float64, 6)}, "in-place/rank=1": {1, big[4:10]}, "in-place/rank=0": {0, big[:4]},
		"beside-recv": {0, make([]float64, 4)},
	} {
		if _, err := comm.CheckAllgatherv(c.rank, 2, v(c.send), v(recv), counts, displs); err != nil {
			t.Errorf("allgatherv/%s: %v", name, err)
		}
	}
	for name, c := range map[string]call{
		"shifted-own": {1, big[3:9]}, "other-region": {0, big[4:8]}, "past-the-end": {1, big[5:11]},
	} {
		t.Run("allgatherv/"+name, func(t *testing.T) {
			_, err := comm.CheckAllgatherv(c.rank, 2, v(c.send), v(recv), counts, displs)
			isArg(t, err, fmt.Sprintf("send shares memory with recv but is not rank %d's own region of it", c.rank))
		})
	}
}
