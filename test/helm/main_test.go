package helm

import (
	"os"
	"testing"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

func TestMain(m *testing.M) {
	// The API server's warnings (the policies') reach controller-runtime's
	// logger, which would otherwise complain, with a stack, that none is set.
	ctrllog.SetLogger(logr.Discard())
	code := m.Run()
	for _, dir := range tempDirs {
		_ = os.RemoveAll(dir)
	}
	os.Exit(code)
}
