package storage

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
)

// jsonSize agrees with json.Encoder's output, newline aside, for what
// unstructured objects hold: every escape, float form and nesting.
func TestJSONSizeIsEncodingLength(t *testing.T) {
	edges := []any{
		nil, true, false, "", `"\`, "\b\f\n\r\t\x00\x1f\x7f", "<a href='x'>&</a>", "\u2028\u2029", "é日本\U0001F600",
		"\xff\xfe bad \xc3", "tail\xe2\x82", int64(0), int64(-1), int64(math.MaxInt64), int64(math.MinInt64), 7, int32(-5),
		0.0, -0.0, 1.5, 1e-6, 1e-7, 9.99e-7, 1e20, 1e21, 1.23456789e21, -3e-9, 5e-10, math.MaxFloat64, math.SmallestNonzeroFloat64,
		123456789.125, map[string]any{}, []any{}, map[string]any(nil), []any(nil), map[string]string{"x": "<y>"}, []string{"a", "b"},
		map[string]any{"a": []any{map[string]any{"b": nil}}, "<key>": "v"},
	}
	for _, v := range edges {
		checkJSONSize(t, v)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		checkJSONSize(t, randomJSON(r, 4))
	}
	for _, v := range []any{math.NaN(), math.Inf(1), map[string]any{"x": math.Inf(-1)}, []any{make(chan int)}} {
		if n := jsonSize(v); n != 0 {
			t.Errorf("%v has no encoding, size %d", v, n)
		}
	}
}

func checkJSONSize(t *testing.T, v any) {
	t.Helper()
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		t.Fatalf("%#v: %v", v, err)
	}
	if got, want := jsonSize(v)+1, int64(buf.Len()); got != want {
		t.Errorf("%#v: size %d, encoding %d bytes: %s", v, got, want, buf.Bytes())
	}
}

// randomJSON is a value an unstructured object may hold, nested at most
// depth levels.
func randomJSON(r *rand.Rand, depth int) any {
	kind := r.IntN(9)
	if depth == 0 {
		kind = r.IntN(6)
	}
	switch kind {
	case 0:
		return nil
	case 1:
		return r.IntN(2) == 0
	case 2:
		return randomString(r)
	case 3:
		return r.Int64() - r.Int64()
	case 4:
		if f := math.Float64frombits(r.Uint64()); !math.IsNaN(f) && !math.IsInf(f, 0) {
			return f
		}
		return 0.0
	case 5:
		return float64(r.IntN(2000)-1000) * math.Pow(10, float64(r.IntN(60)-30))
	case 6, 7:
		m := map[string]any{}
		for range r.IntN(5) {
			m[randomString(r)] = randomJSON(r, depth-1)
		}
		return m
	default:
		s := make([]any, r.IntN(5))
		for i := range s {
			s[i] = randomJSON(r, depth-1)
		}
		return s
	}
}

func randomString(r *rand.Rand) string {
	alphabet := []string{"a", "Z", "0", " ", `"`, `\`, "<", ">", "&", "\n", "\t", "\x01", "\x7f", "é", "日", "\U0001F600", "\u2028", "\xff", "\xe2\x82"}
	var b []byte
	for range r.IntN(12) {
		b = append(b, alphabet[r.IntN(len(alphabet))]...)
	}
	return string(b)
}
