package index_test

import (
	"reflect"
	"testing"

	"github.com/xetcdn/xetcdn/origin/internal/index"
)

// decorators are every Index decorator of this package. A new one belongs here.
var decorators = []any{
	(*index.LayoutCache)(nil),
	(*index.FileCache)(nil),
	(*index.Timeouts)(nil),
	(*index.Metrics)(nil),
}

// explicitMethods reports, for the pointer-to-struct type of d, the methods of iface it does
// not declare itself: missing ones, and any it could only have by promotion from an embedded
// field. A decorator that embeds the interface it wraps would forward a method added to the
// interface unchanged, past its own logic (a timeout, a cache invalidation), without anyone
// deciding so; a type without embedded fields has only the methods declared on it.
func explicitMethods(d any, iface reflect.Type) []string {
	pt := reflect.TypeOf(d)
	var bad []string
	if !pt.Implements(iface) {
		bad = append(bad, "does not implement "+iface.String())
	}
	st := pt.Elem()
	for f := range st.Fields() {
		if f.Anonymous {
			bad = append(bad, "embeds "+f.Type.String())
		}
	}
	return bad
}

func TestDecoratorsDeclareEveryMethod(t *testing.T) {
	iface := reflect.TypeFor[index.Index]()
	for _, d := range decorators {
		if bad := explicitMethods(d, iface); len(bad) > 0 {
			t.Errorf("%T: %v", d, bad)
		}
	}
	// The guard itself: a test double that embeds index.Index fails it.
	if bad := explicitMethods(&stalledIndex{}, iface); len(bad) == 0 {
		t.Error("stalledIndex embeds index.Index, yet passes the guard")
	}
}
