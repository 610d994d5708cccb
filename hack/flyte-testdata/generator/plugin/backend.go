// Package plugin is the Flyte testdata generator's backend for the Flyte
// releases whose flyteplugins the Go module proxy serves but whose
// flytepropeller it does not: flyteplugins' own mpi plugin builds the
// MPIJob (BuildResource), and what flytepropeller adds around it is done
// here as flytepropeller v1.9.12 and v1.16.8 both do it: the task
// execution context of the task's first attempt, and the k8s plugin
// manager's metadata (addObjectMetadata). Each such release's tools module
// compiles it against its own flyteplugins; see ../../README.md.
package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flyteorg/flyte/flyteidl/gen/pb-go/flyteidl/core"
	"github.com/flyteorg/flyte/flyteplugins/go/tasks/pluginmachinery"
	pluginscore "github.com/flyteorg/flyte/flyteplugins/go/tasks/pluginmachinery/core"
	pluginsmocks "github.com/flyteorg/flyte/flyteplugins/go/tasks/pluginmachinery/core/mocks"
	"github.com/flyteorg/flyte/flyteplugins/go/tasks/pluginmachinery/encoding"
	"github.com/flyteorg/flyte/flyteplugins/go/tasks/pluginmachinery/flytek8s"
	k8sconfig "github.com/flyteorg/flyte/flyteplugins/go/tasks/pluginmachinery/flytek8s/config"
	"github.com/flyteorg/flyte/flyteplugins/go/tasks/pluginmachinery/ioutils"
	"github.com/flyteorg/flyte/flyteplugins/go/tasks/pluginmachinery/k8s"
	pluginsutils "github.com/flyteorg/flyte/flyteplugins/go/tasks/pluginmachinery/utils"
	_ "github.com/flyteorg/flyte/flyteplugins/go/tasks/plugins/k8s/kfoperators/mpi" // registers the "mpi" k8s plugin
	"github.com/flyteorg/flyte/flytestdlib/contextutils"
	"github.com/flyteorg/flyte/flytestdlib/logger"
	"github.com/flyteorg/flyte/flytestdlib/promutils"
	"github.com/flyteorg/flyte/flytestdlib/promutils/labeled"
	"github.com/flyteorg/flyte/flytestdlib/storage"

	"github.com/flyteorg/flyte-mpi-webhook/hack/flyte-testdata/generator"
	"github.com/flyteorg/flyte-mpi-webhook/hack/flyte-testdata/generator/task"
	"github.com/flyteorg/flyte-mpi-webhook/hack/flyte-testdata/generator/taskcontext"
)

// Setup does what flytepropeller does at start-up before it builds a task's
// resources.
func Setup() error {
	// Flyte's components log every launch at info level; keep warnings only.
	if err := logger.SetConfig(&logger.Config{Level: logger.WarnLevel}); err != nil {
		return fmt.Errorf("configuring Flyte's logger: %w", err)
	}
	// flytepropeller's default metric keys, which the data store's labeled
	// metrics need.
	labeled.SetMetricKeys(contextutils.ProjectKey, contextutils.DomainKey, contextutils.WorkflowIDKey, contextutils.TaskIDKey)
	return nil
}

// The labels flytepropeller gives this execution, as v1.9.12 and v1.16.8
// both give them (testdata/flyte/v1 and testdata/flyte/releases/v1.9.12):
// transformers/k8s.BuildFlyteWorkflow's on the FlyteWorkflow, then
// nodes.newNodeExecContext's for node n0, each value sanitized as a label.
var (
	workflowLabels = map[string]string{
		"domain":        generator.Domain,
		"execution-id":  generator.ExecutionName,
		"project":       generator.Project,
		"shard-key":     "5", // the execution id's hash, modulo flytepropeller's 32 shards
		"workflow-name": "kfmpi-plugin-mpi-mnist-horovod-training-wf",
	}
	nodeLabels = map[string]string{
		"node-id":       generator.NodeID,
		"task-name":     "kfmpi-plugin-mpi-mnist-horovod-train-task",
		"interruptible": "false",
	}
)

// finalizer is flytepropeller's k8s plugin manager's finalizer.
const finalizer = "flyte/flytek8s"

// Build runs the release's mpi plugin on one case, with flytepropeller's
// part done here, and returns the MPIJob as flytepropeller would create it.
func Build(ctx context.Context, c generator.Case) (generator.Built, error) {
	tmpl, notes, err := task.Decode(c)
	if err != nil {
		return generator.Built{}, err
	}
	entry, err := mpiPluginEntry()
	if err != nil {
		return generator.Built{}, err
	}
	tCtx, err := newTaskExecutionContext(ctx, tmpl, c.Execution)
	if err != nil {
		return generator.Built{}, err
	}
	o, err := entry.Plugin.BuildResource(ctx, tCtx)
	if err != nil {
		return generator.Built{}, fmt.Errorf("the mpi plugin's BuildResource for task %q: %w", tmpl.GetId().GetName(), err)
	}
	addObjectMetadata(tCtx.TaskExecutionMetadata(), o, k8sconfig.GetK8sPluginConfig(), tmpl, entry.Plugin.GetProperties())
	b, err := json.Marshal(o)
	if err != nil {
		return generator.Built{}, fmt.Errorf("encoding MPIJob %s: %w", o.GetName(), err)
	}
	return generator.Built{Job: b, Notes: notes}, nil
}

// addObjectMetadata is flytepropeller's PluginManager.addObjectMetadata: the
// plugin config's defaults, the plugin's own metadata, the task's
// @task(labels=..., annotations=...) where this release's flyteidl has them
// (flyteorg/flyte#6421 added the field and its use together), and the
// execution's, in that order of precedence from lowest.
func addObjectMetadata(md pluginscore.TaskExecutionMetadata, o client.Object, cfg *k8sconfig.K8sPluginConfig,
	tmpl *core.TaskTemplate, props k8s.PluginProperties) {
	taskLabels, taskAnnotations := task.K8sMetadata(tmpl)
	o.SetNamespace(md.GetNamespace())
	o.SetAnnotations(pluginsutils.UnionMaps(cfg.DefaultAnnotations, o.GetAnnotations(), taskAnnotations,
		pluginsutils.CopyMap(md.GetAnnotations())))
	o.SetLabels(pluginsutils.UnionMaps(cfg.DefaultLabels, o.GetLabels(), taskLabels, pluginsutils.CopyMap(md.GetLabels())))
	o.SetName(md.GetTaskExecutionID().GetGeneratedName())
	if !props.DisableInjectOwnerReferences {
		o.SetOwnerReferences([]metav1.OwnerReference{md.GetOwnerReference()})
	}
	if cfg.InjectFinalizer && !props.DisableInjectFinalizer {
		o.SetFinalizers(append(o.GetFinalizers(), finalizer))
	}
}

// mpiPluginEntry returns the k8s plugin that flyteplugins' mpi package
// registered for task type "mpi", exactly as flytepropeller loads it.
func mpiPluginEntry() (k8s.PluginEntry, error) {
	for _, e := range pluginmachinery.PluginRegistry().GetK8sPlugins() {
		if e.ID == "mpi" {
			return e, nil
		}
	}
	return k8s.PluginEntry{}, errors.New(`flyteplugins registered no k8s plugin with ID "mpi"`)
}

// newTaskExecutionContext builds the task execution context that
// flytepropeller's task handler gives the plugin for the first attempt of
// node n0: the same data directories, input, output and raw-output paths
// and generated name as hack/flyte-testdata's propeller backend, which
// takes them from flytepropeller itself.
func newTaskExecutionContext(ctx context.Context, tmpl *core.TaskTemplate, exec generator.Execution) (pluginscore.TaskExecutionContext, error) {
	store, err := storage.NewDataStore(&storage.Config{Type: storage.TypeMemory}, promutils.NewTestScope())
	if err != nil {
		return nil, fmt.Errorf("creating an in-memory data store: %w", err)
	}
	// flytepropeller: <metadata prefix>/<project>-<domain>-<name>/<node>/data,
	// and the attempt's outputs under /<attempt>.
	const attempt = 0
	dataDir, err := store.ConstructReference(ctx, storage.DataReference(generator.MetadataPrefix),
		fmt.Sprintf("%s-%s-%s", generator.Project, generator.Domain, generator.ExecutionName), generator.NodeID, "data")
	if err != nil {
		return nil, fmt.Errorf("constructing the node data directory: %w", err)
	}
	outputDir, err := store.ConstructReference(ctx, dataDir, strconv.Itoa(attempt))
	if err != nil {
		return nil, fmt.Errorf("constructing the node output directory: %w", err)
	}
	// The task has no inputs; the plugin reads them to render the container args.
	if err := store.WriteProtobuf(ctx, dataDir+"/inputs.pb", storage.Options{}, &core.LiteralMap{}); err != nil {
		return nil, fmt.Errorf("writing the inputs of node %q: %w", generator.NodeID, err)
	}
	uniqueID, err := encoding.FixedLengthUniqueIDForParts(generator.GeneratedNameMaxLength,
		[]string{generator.ExecutionName, generator.NodeID, strconv.Itoa(attempt)})
	if err != nil {
		return nil, fmt.Errorf("generating the task execution name: %w", err)
	}
	shards, err := ioutils.NewBase36PrefixShardSelector(ctx)
	if err != nil {
		return nil, fmt.Errorf("creating the raw output shard selector: %w", err)
	}
	rawOutput, err := ioutils.NewShardedRawOutputPath(ctx, shards, storage.DataReference(generator.RawDataPrefix), uniqueID, store)
	if err != nil {
		return nil, fmt.Errorf("constructing the raw output path: %w", err)
	}

	namespace := generator.Namespace
	if exec.Namespace != "" {
		namespace = exec.Namespace
	}
	// flyteadmin's PrepareFlyteWorkflow merges the execution's labels and
	// annotations over the FlyteWorkflow's; the node adds its own.
	labels := pluginsutils.UnionMaps(workflowLabels, exec.Labels, nodeLabels)
	overrides, err := noOverrides()
	if err != nil {
		return nil, err
	}
	md := &taskExecutionMetadata{
		namespace:   namespace,
		labels:      labels,
		annotations: pluginsutils.CopyMap(exec.Annotations),
		overrides:   overrides,
		id: &taskcontext.TaskExecutionID{
			Name: uniqueID,
			ID: &core.TaskExecutionIdentifier{
				TaskId: tmpl.GetId(),
				NodeExecutionId: &core.NodeExecutionIdentifier{
					NodeId: generator.NodeID,
					ExecutionId: &core.WorkflowExecutionIdentifier{
						Project: generator.Project, Domain: generator.Domain, Name: generator.ExecutionName,
					},
				},
			},
			UniqueNodeID: generator.NodeID,
		},
	}
	if md.annotations == nil {
		md.annotations = map[string]string{}
	}
	return taskcontext.New(ctx, md, tmpl, store, dataDir, outputDir, rawOutput), nil
}

// noOverrides is a node without overrides, as flytepropeller's compiler
// builds it for a workflow node that sets none: resources that
// flytek8s.ToK8sResourceRequirements makes of no resources, and every other
// method of this release's TaskOverrides returning its zero value (a nil
// pointer, an empty string). A mock, so that one source fits every
// release's TaskOverrides.
func noOverrides() (pluginscore.TaskOverrides, error) {
	resources, err := flytek8s.ToK8sResourceRequirements(nil)
	if err != nil {
		return nil, fmt.Errorf("the resources of a node without overrides: %w", err)
	}
	o := &pluginsmocks.TaskOverrides{}
	methods := reflect.TypeOf((*pluginscore.TaskOverrides)(nil)).Elem()
	for i := range methods.NumMethod() {
		m := methods.Method(i)
		if m.Name == "GetResources" {
			o.On(m.Name).Return(resources)
			continue
		}
		zeros := make([]any, m.Type.NumOut())
		for j := range zeros {
			zeros[j] = reflect.Zero(m.Type.Out(j)).Interface()
		}
		o.On(m.Name).Return(zeros...)
	}
	return o, nil
}

// taskExecutionMetadata is what flytepropeller's task.taskExecutionMetadata
// answers for this execution: no service account, security context,
// platform resources or environment of its own.
type taskExecutionMetadata struct {
	namespace   string
	labels      map[string]string
	annotations map[string]string
	overrides   pluginscore.TaskOverrides
	id          *taskcontext.TaskExecutionID
}

func (m *taskExecutionMetadata) GetOwnerID() types.NamespacedName {
	return types.NamespacedName{Name: generator.ExecutionName, Namespace: m.namespace}
}
func (m *taskExecutionMetadata) GetTaskExecutionID() pluginscore.TaskExecutionID { return m.id }
func (m *taskExecutionMetadata) GetNamespace() string                            { return m.namespace }

// GetOwnerReference is the FlyteWorkflow's, as v1alpha1.FlyteWorkflow.GetOwnerReference gives it.
func (m *taskExecutionMetadata) GetOwnerReference() metav1.OwnerReference {
	controller, block := true, true
	return metav1.OwnerReference{
		APIVersion: "flyte.lyft.com/v1alpha1", Kind: "flyteworkflow",
		Name: generator.ExecutionName, UID: types.UID(generator.WorkflowUID),
		Controller: &controller, BlockOwnerDeletion: &block,
	}
}
func (m *taskExecutionMetadata) GetOverrides() pluginscore.TaskOverrides { return m.overrides }
func (m *taskExecutionMetadata) GetLabels() map[string]string            { return m.labels }
func (m *taskExecutionMetadata) GetMaxAttempts() uint32                  { return 1 }
func (m *taskExecutionMetadata) GetAnnotations() map[string]string       { return m.annotations }
func (m *taskExecutionMetadata) GetK8sServiceAccount() string            { return "" }
func (m *taskExecutionMetadata) GetSecurityContext() core.SecurityContext {
	return core.SecurityContext{}
}
func (m *taskExecutionMetadata) IsInterruptible() bool { return false }
func (m *taskExecutionMetadata) GetPlatformResources() *corev1.ResourceRequirements {
	return &corev1.ResourceRequirements{}
}
func (m *taskExecutionMetadata) GetInterruptibleFailureThreshold() int32    { return 0 }
func (m *taskExecutionMetadata) GetEnvironmentVariables() map[string]string { return nil }
func (m *taskExecutionMetadata) GetConsoleURL() string                      { return "" }
