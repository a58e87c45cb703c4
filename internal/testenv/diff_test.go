package testenv

import (
	"reflect"
	"testing"
)

func TestDiffMaps(t *testing.T) {
	got := map[string]string{"a": "1", "b": "2", "c": "3"}
	want := map[string]string{"a": "1", "b": "x", "d": "4"}
	d := DiffMaps(got, want)
	exp := []MapDiff{
		{Key: "b", Got: "2", Want: "x", InGot: true, InWant: true},
		{Key: "c", Got: "3", InGot: true},
		{Key: "d", Want: "4", InWant: true},
	}
	if !reflect.DeepEqual(d, exp) {
		t.Errorf("DiffMaps = %+v, want %+v", d, exp)
	}
	if d := DiffMaps(want, want); d != nil {
		t.Errorf("equal maps differ: %+v", d)
	}
}
