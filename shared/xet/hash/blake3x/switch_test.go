package blake3x

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGenericSwitch: XETCDN_BLAKE3=generic in the environment keeps the kernel off (checked in a
// child process, since the switch is read once at start).
func TestGenericSwitch(t *testing.T) {
	if os.Getenv("BLAKE3X_SWITCH_CHILD") == "1" {
		if Enabled() {
			t.Fatal("Enabled() with XETCDN_BLAKE3=generic")
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestGenericSwitch$", "-test.count", "1")
	cmd.Env = append(os.Environ(), "BLAKE3X_SWITCH_CHILD=1", "XETCDN_BLAKE3=generic")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if os.Getenv("XETCDN_BLAKE3") == "" && Enabled() != haveKernel {
		t.Fatalf("Enabled() = %v without the switch, want %v (the CPU's)", Enabled(), haveKernel)
	}
}

// TestGeneratedFilesUpToDate: kernel_amd64.s and compress_gen.go are what gen_kernel.go writes.
func TestGeneratedFilesUpToDate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the generator")
	}
	dir := t.TempDir()
	s, g := filepath.Join(dir, "kernel_amd64.s"), filepath.Join(dir, "compress_gen.go")
	cmd := exec.Command("go", "run", "gen_kernel.go", "-out", s, "-goout", g)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run gen_kernel.go: %v\n%s", err, out)
	}
	for _, pair := range [][2]string{{s, "kernel_amd64.s"}, {g, "compress_gen.go"}} {
		fresh, err := os.ReadFile(pair[0])
		if err != nil {
			t.Fatal(err)
		}
		committed, err := os.ReadFile(pair[1])
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(fresh, committed) {
			t.Errorf("%s differs from gen_kernel.go's output: run go generate", pair[1])
		}
	}
}
