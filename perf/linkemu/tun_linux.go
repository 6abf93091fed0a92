package linkemu

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// OpenTUN creates the TUN device ifname inside the named network namespace (/run/netns/NAME,
// as `ip netns add` makes it), gives it addr/prefix and mtu, brings it and the namespace's
// loopback up, and returns the device: reads and writes are whole IP packets. The device
// disappears when the returned file is closed (it is not persistent). Needs CAP_NET_ADMIN and
// CAP_SYS_ADMIN (root).
func OpenTUN(netns, ifname, addr string, prefix, mtu int) (*os.File, error) {
	fd, err := tunIn(netns, ifname)
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("tun %s/%s: %w", netns, ifname, err)
	}
	// Non-blocking before NewFile: reads then wait in the runtime's poller, not on a thread.
	f := os.NewFile(uintptr(fd), "tun:"+netns+"/"+ifname)
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "set", ifname, "mtu", fmt.Sprint(mtu), "up"},
		{"addr", "add", fmt.Sprintf("%s/%d", addr, prefix), "dev", ifname},
	} {
		if out, err := exec.Command("ip", append([]string{"-n", netns}, args...)...).CombinedOutput(); err != nil {
			f.Close()
			return nil, fmt.Errorf("ip -n %s %v: %v: %s", netns, args, err, out)
		}
	}
	return f, nil
}

// tunIn opens /dev/net/tun from a thread that has entered the namespace: the device is created
// in the caller's namespace at TUNSETIFF time and stays there.
func tunIn(netns, ifname string) (fd int, err error) {
	runtime.LockOSThread()
	self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return -1, fmt.Errorf("own network namespace: %w", err)
	}
	defer unix.Close(self)
	target, err := unix.Open("/run/netns/"+netns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return -1, fmt.Errorf("netns %s: %w", netns, err)
	}
	defer unix.Close(target)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return -1, fmt.Errorf("enter netns %s: %w", netns, err)
	}
	defer func() {
		// A thread that cannot go back stays locked: the runtime ends it with the goroutine.
		if e := unix.Setns(self, unix.CLONE_NEWNET); e == nil {
			runtime.UnlockOSThread()
		} else if err == nil {
			unix.Close(fd)
			fd, err = -1, fmt.Errorf("leave netns %s: %w", netns, e)
		}
	}()
	fd, err = unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(ifname)
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("tun name %q: %w", ifname, err)
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("TUNSETIFF %s in %s: %w", ifname, netns, err)
	}
	return fd, nil
}
