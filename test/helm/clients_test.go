package helm

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	actionv3 "helm.sh/helm/v3/pkg/action"
	loaderv3 "helm.sh/helm/v3/pkg/chart/loader"
	actionv4 "helm.sh/helm/v4/pkg/action"
	loaderv4 "helm.sh/helm/v4/pkg/chart/loader"
	kubev4 "helm.sh/helm/v4/pkg/kube"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// helmTimeout bounds one helm action.
const helmTimeout = 2 * time.Minute

// helmCLI is what a test does with a chart, as `helm install`, `helm
// upgrade` and `helm uninstall` of one release do. chart is the chart's
// directory: the work tree's (ChartDir), or an older release's (v010).
type helmCLI interface {
	install(chart string, values map[string]any) error
	// upgrade is `helm upgrade`, with reuseValues `helm upgrade --reuse-values`.
	upgrade(chart string, values map[string]any, reuseValues bool) error
	uninstall() error
	// test is `helm test`.
	test() error
}

// restClientGetter is what `helm --kubeconfig FILE -n NAMESPACE` uses.
func restClientGetter(kubeconfig, namespace string) genericclioptions.RESTClientGetter {
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig, flags.Namespace = &kubeconfig, &namespace
	return flags
}

// helm3 drives the Helm 3 SDK (helm.sh/helm/v3), as the helm 3 CLI does:
// client-side three-way merge patches.
type helm3 struct {
	cfg       *actionv3.Configuration
	namespace string
}

func newHelm3(kubeconfig, namespace string) (*helm3, error) {
	cfg := &actionv3.Configuration{}
	if err := cfg.Init(restClientGetter(kubeconfig, namespace), namespace, "secret", func(string, ...any) {}); err != nil {
		return nil, fmt.Errorf("helm 3: %w", err)
	}
	return &helm3{cfg: cfg, namespace: namespace}, nil
}

func (h *helm3) install(dir string, values map[string]any) error {
	chart, err := loaderv3.Load(dir)
	if err != nil {
		return err
	}
	install := actionv3.NewInstall(h.cfg)
	install.ReleaseName, install.Namespace, install.CreateNamespace = ReleaseName, h.namespace, true
	install.Timeout = helmTimeout
	_, err = install.Run(chart, values)
	return err
}

func (h *helm3) upgrade(dir string, values map[string]any, reuseValues bool) error {
	chart, err := loaderv3.Load(dir)
	if err != nil {
		return err
	}
	upgrade := actionv3.NewUpgrade(h.cfg)
	upgrade.Namespace, upgrade.Timeout, upgrade.ReuseValues = h.namespace, helmTimeout, reuseValues
	_, err = upgrade.Run(ReleaseName, chart, values)
	return err
}

func (h *helm3) uninstall() error {
	uninstall := actionv3.NewUninstall(h.cfg)
	uninstall.Timeout = helmTimeout
	_, err := uninstall.Run(ReleaseName)
	return err
}

func (h *helm3) test() error {
	test := actionv3.NewReleaseTesting(h.cfg)
	test.Namespace, test.Timeout = h.namespace, helmTimeout
	_, err := test.Run(ReleaseName)
	return err
}

// helm4 drives the Helm 4 SDK (helm.sh/helm/v4), as the helm 4 CLI does:
// server-side apply.
type helm4 struct {
	cfg       *actionv4.Configuration
	namespace string
}

func newHelm4(kubeconfig, namespace string) (*helm4, error) {
	cfg := actionv4.NewConfiguration(actionv4.ConfigurationSetLogger(slog.DiscardHandler))
	if err := cfg.Init(restClientGetter(kubeconfig, namespace), namespace, "secret"); err != nil {
		return nil, fmt.Errorf("helm 4: %w", err)
	}
	return &helm4{cfg: cfg, namespace: namespace}, nil
}

func (h *helm4) install(dir string, values map[string]any) error {
	chart, err := loaderv4.Load(dir)
	if err != nil {
		return err
	}
	install := actionv4.NewInstall(h.cfg)
	install.ReleaseName, install.Namespace, install.CreateNamespace = ReleaseName, h.namespace, true
	install.Timeout, install.WaitStrategy = helmTimeout, kubev4.HookOnlyStrategy
	_, err = install.Run(chart, values)
	return err
}

func (h *helm4) upgrade(dir string, values map[string]any, reuseValues bool) error {
	chart, err := loaderv4.Load(dir)
	if err != nil {
		return err
	}
	upgrade := actionv4.NewUpgrade(h.cfg)
	upgrade.Namespace, upgrade.Timeout, upgrade.WaitStrategy = h.namespace, helmTimeout, kubev4.HookOnlyStrategy
	upgrade.ReuseValues = reuseValues
	_, err = upgrade.Run(ReleaseName, chart, values)
	return err
}

func (h *helm4) uninstall() error {
	uninstall := actionv4.NewUninstall(h.cfg)
	uninstall.Timeout, uninstall.WaitStrategy = helmTimeout, kubev4.HookOnlyStrategy
	_, err := uninstall.Run(ReleaseName)
	return err
}

// test is `helm test`: its hooks that passed are deleted once it returns,
// after helm test --logs has read them.
func (h *helm4) test() error {
	test := actionv4.NewReleaseTesting(h.cfg)
	test.Namespace, test.Timeout = h.namespace, helmTimeout
	_, shutdown, err := test.Run(ReleaseName)
	return errors.Join(err, shutdown())
}
