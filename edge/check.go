package edge

import (
	"fmt"

	"github.com/xetcdn/xetcdn/edge/internal/config"
)

// CheckConfig implements `xet-edge check-config`: it loads the configuration from args and
// getenv exactly as Start does (file, flags, the origin token, validation) and returns a
// one-line summary, without creating, opening or connecting to anything (the TLS files, if
// configured, are not read). Its error wraps ErrConfig.
func CheckConfig(args []string, getenv func(string) string) (string, error) {
	cfg, err := config.Load(args, getenv)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("configuration ok: origin %s, data_dir %s, listen %s, http_listen %q, admin_listen %q, public_url %q",
		cfg.Origin, cfg.DataDir, cfg.Listen, cfg.HTTPListen, cfg.AdminListen, cfg.PublicURL), nil
}
