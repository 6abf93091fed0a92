package origin

import (
	"fmt"

	"github.com/xetcdn/xetcdn/origin/internal/config"
)

// CheckConfig implements `xet-origin check-config`: it loads the configuration from args and
// getenv exactly as Run does (file, flags, secrets, validation) and returns a one-line summary,
// without creating, opening or connecting to anything. Its error wraps ErrConfig.
func CheckConfig(args []string, getenv func(string) string) (string, error) {
	cfg, err := config.Load(args, getenv)
	if err != nil {
		return "", err
	}
	keys := "key_dir " + cfg.Auth.KeyDir
	if cfg.Auth.Secret != nil {
		keys = "shared secret"
		if cfg.Auth.PreviousSecret != nil {
			keys += " (and the previous one)"
		}
	}
	return fmt.Sprintf("configuration ok: data_dir %s, listen %s, admin_listen %q, index %s, objects %s, public_url %s, keys from %s",
		cfg.DataDir, cfg.Listen, cfg.AdminListen, cfg.Index.Driver, cfg.Objects.Driver, cfg.PublicURL, keys), nil
}
