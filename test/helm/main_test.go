package helm

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

func TestMain(m *testing.M) {
	// The API server's warnings (the policies') reach controller-runtime's
	// logger, which would otherwise complain, with a stack, that none is set.
	ctrllog.SetLogger(logr.Discard())
	code := m.Run()
	if webhookBinary != "" {
		_ = os.RemoveAll(filepath.Dir(webhookBinary))
	}
	os.Exit(code)
}
