// Package propeller is the Flyte testdata generator's backend for the
// Flyte releases whose flytepropeller the Go module proxy serves: it runs
// flytepropeller's compiler, FlyteWorkflow builder and k8s PluginManager
// with flyteplugins' mpi plugin, as flytepropeller runs a new task node.
// Each such release's tools module compiles it against its own Flyte
// modules; see ../../README.md. The tests' Flyte backend (test/flyte) runs
// the same pieces, BuildFlyteWorkflow and HandleFirstAttempt, with a real
// client.
package propeller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/flyteorg/flyte/flyteidl/gen/pb-go/flyteidl/admin"
	"github.com/flyteorg/flyte/flyteidl/gen/pb-go/flyteidl/core"
	"github.com/flyteorg/flyte/flyteplugins/go/tasks/pluginmachinery"
	pluginscore "github.com/flyteorg/flyte/flyteplugins/go/tasks/pluginmachinery/core"
	"github.com/flyteorg/flyte/flyteplugins/go/tasks/pluginmachinery/encoding"
	"github.com/flyteorg/flyte/flyteplugins/go/tasks/pluginmachinery/ioutils"
	"github.com/flyteorg/flyte/flyteplugins/go/tasks/pluginmachinery/k8s"
	_ "github.com/flyteorg/flyte/flyteplugins/go/tasks/plugins/k8s/kfoperators/mpi" // registers the "mpi" k8s plugin
	"github.com/flyteorg/flyte/flytepropeller/pkg/apis/flyteworkflow/v1alpha1"
	"github.com/flyteorg/flyte/flytepropeller/pkg/compiler"
	"github.com/flyteorg/flyte/flytepropeller/pkg/compiler/common"
	wfbuilder "github.com/flyteorg/flyte/flytepropeller/pkg/compiler/transformers/k8s"
	"github.com/flyteorg/flyte/flytepropeller/pkg/controller/executors/mocks"
	taskk8s "github.com/flyteorg/flyte/flytepropeller/pkg/controller/nodes/task/k8s"
	propellerutils "github.com/flyteorg/flyte/flytepropeller/pkg/utils"
	"github.com/flyteorg/flyte/flytestdlib/contextutils"
	"github.com/flyteorg/flyte/flytestdlib/logger"
	"github.com/flyteorg/flyte/flytestdlib/promutils"
	"github.com/flyteorg/flyte/flytestdlib/promutils/labeled"
	"github.com/flyteorg/flyte/flytestdlib/storage"

	"github.com/flyteorg/flyte-mpi-webhook/hack/flyte-testdata/generator"
	"github.com/flyteorg/flyte-mpi-webhook/hack/flyte-testdata/generator/task"
	"github.com/flyteorg/flyte-mpi-webhook/hack/flyte-testdata/generator/taskcontext"
)

// adminRawOutputDataConfig is flyteadmin's raw output location for the
// execution (its sandbox default).
var adminRawOutputDataConfig = admin.RawOutputDataConfig{OutputLocationPrefix: generator.RawDataPrefix}

// Setup does what flytepropeller does at start-up before it runs a plugin
// manager.
func Setup() error {
	// Flyte's components log every launch at info level; keep warnings only.
	if err := logger.SetConfig(&logger.Config{Level: logger.WarnLevel}); err != nil {
		return fmt.Errorf("configuring Flyte's logger: %w", err)
	}
	// flytepropeller's default metric keys, which it sets at start-up before
	// any plugin manager registers its labeled metrics.
	labeled.SetMetricKeys(contextutils.ProjectKey, contextutils.DomainKey, contextutils.WorkflowIDKey, contextutils.TaskIDKey)
	return nil
}

// Build runs Flyte's backend on one case: see buildMPIJob.
func Build(ctx context.Context, c generator.Case) (generator.Built, error) {
	tmpl, notes, err := task.Decode(c)
	if err != nil {
		return generator.Built{}, err
	}
	job, err := buildMPIJob(ctx, tmpl, c.Execution)
	if err != nil {
		return generator.Built{}, err
	}
	return generator.Built{Job: job, Notes: notes}, nil
}

// buildMPIJob runs Flyte's backend on one task: flytepropeller compiles a
// one-node workflow around the task and turns it into a FlyteWorkflow, and
// flytepropeller's k8s PluginManager drives flyteplugins' mpi plugin to
// create the MPIJob in a fake Kubernetes client, from which it is read back.
func buildMPIJob(ctx context.Context, tmpl *core.TaskTemplate, exec generator.Execution) ([]byte, error) {
	scheme, err := NewScheme()
	if err != nil {
		return nil, err
	}
	kubeClient := &recordingClient{Client: fake.NewClientBuilder().WithScheme(scheme).Build()}
	wf, err := BuildFlyteWorkflow(tmpl, exec)
	if err != nil {
		return nil, err
	}
	transition, err := HandleFirstAttempt(ctx, kubeClient, wf)
	if err != nil {
		return nil, fmt.Errorf("plugin manager Handle for task %q: %w", tmpl.GetId().GetName(), err)
	}
	if phase := transition.Info().Phase(); phase != pluginscore.PhaseQueued {
		return nil, fmt.Errorf("plugin manager Handle for task %q: phase %v (%v), want %v",
			tmpl.GetId().GetName(), phase, transition.Info().Err(), pluginscore.PhaseQueued)
	}
	if len(kubeClient.created) != 1 {
		return nil, fmt.Errorf("the plugin manager created %d objects for task %q, want 1 MPIJob", len(kubeClient.created), tmpl.GetId().GetName())
	}
	return kubeClient.created[0], nil
}

// recordingClient records, as JSON, each object created through it as it
// is sent: what the API server receives, before anything (the older fake
// clients apply the training-operator's Go defaults when read back) changes it.
type recordingClient struct {
	client.Client
	created [][]byte
}

func (c *recordingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	b, err := json.Marshal(obj)
	if err != nil {
		return fmt.Errorf("encoding the %T to create: %w", obj, err)
	}
	c.created = append(c.created, b)
	return c.Client.Create(ctx, obj, opts...)
}

// NewScheme returns the types the plugin manager's client serves: client-go's,
// kubeflow.org/v1 and flyte.lyft.com/v1alpha1.
func NewScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("registering client-go types: %w", err)
	}
	if err := kubeflowv1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("registering kubeflow.org/v1 types: %w", err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("registering flyte.lyft.com/v1alpha1 types: %w", err)
	}
	return scheme, nil
}

// HandleFirstAttempt runs the first round of Flyte's backend on wf, a
// FlyteWorkflow from BuildFlyteWorkflow, as flytepropeller runs a new task
// node: flytepropeller's k8s PluginManager, with flyteplugins' mpi plugin
// and kubeClient, handles the first attempt of its task, which creates the
// task's MPIJob. It returns what Handle returns: the transition Flyte
// reports, or the error that flytepropeller takes for a system error.
func HandleFirstAttempt(ctx context.Context, kubeClient client.Client, wf *v1alpha1.FlyteWorkflow) (pluginscore.Transition, error) {
	entry, err := mpiPluginEntry()
	if err != nil {
		return pluginscore.Transition{}, err
	}
	// No clientset: the plugin manager uses one only to watch events, which
	// flyteplugins' default configuration (SendObjectEvents) turns off.
	manager, err := taskk8s.NewPluginManager(ctx, setupContext{client: kubeClient}, entry,
		taskk8s.NewResourceMonitorIndex(), nil)
	if err != nil {
		return pluginscore.Transition{}, fmt.Errorf("creating flytepropeller's k8s plugin manager for %q: %w", entry.ID, err)
	}
	tCtx, err := newTaskExecutionContext(ctx, wf)
	if err != nil {
		return pluginscore.Transition{}, err
	}
	return manager.Handle(ctx, tCtx)
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

// BuildFlyteWorkflow compiles a workflow with one node that runs tmpl and
// builds the FlyteWorkflow that flyteadmin hands to flytepropeller, with
// flyteadmin's PrepareFlyteWorkflow metadata merge.
func BuildFlyteWorkflow(tmpl *core.TaskTemplate, exec generator.Execution) (*v1alpha1.FlyteWorkflow, error) {
	compiledTask, err := compiler.CompileTask(tmpl)
	if err != nil {
		return nil, fmt.Errorf("compiling task %q: %w", tmpl.GetId().GetName(), err)
	}
	wfTemplate := &core.WorkflowTemplate{
		Id: &core.Identifier{
			ResourceType: core.ResourceType_WORKFLOW,
			Project:      generator.Project,
			Domain:       generator.Domain,
			Name:         generator.WorkflowName,
			Version:      tmpl.GetId().GetVersion(),
		},
		Metadata:         &core.WorkflowMetadata{},
		MetadataDefaults: &core.WorkflowMetadataDefaults{},
		Interface: &core.TypedInterface{
			Inputs:  &core.VariableMap{Variables: map[string]*core.Variable{}},
			Outputs: &core.VariableMap{Variables: map[string]*core.Variable{}},
		},
		Nodes: []*core.Node{{
			Id:       generator.NodeID,
			Metadata: &core.NodeMetadata{Name: generator.TaskFunction, Retries: &core.RetryStrategy{}},
			Target: &core.Node_TaskNode{TaskNode: &core.TaskNode{
				Reference: &core.TaskNode_ReferenceId{ReferenceId: tmpl.GetId()},
			}},
		}},
	}
	closure, err := compiler.CompileWorkflow(wfTemplate, nil, []*core.CompiledTask{compiledTask}, []common.InterfaceProvider{})
	if err != nil {
		return nil, fmt.Errorf("compiling workflow around task %q: %w", tmpl.GetId().GetName(), err)
	}
	execID := &core.WorkflowExecutionIdentifier{Project: generator.Project, Domain: generator.Domain, Name: generator.ExecutionName}
	ns := generator.Namespace
	if exec.Namespace != "" {
		ns = exec.Namespace
	}
	wf, err := wfbuilder.BuildFlyteWorkflow(closure, &core.LiteralMap{}, execID, ns)
	if err != nil {
		return nil, fmt.Errorf("building the FlyteWorkflow for task %q: %w", tmpl.GetId().GetName(), err)
	}

	// flyteadmin's PrepareFlyteWorkflow (workflowengine/impl/prepare_execution.go):
	// the execution id, then the execution's labels and annotations, which
	// override the FlyteWorkflow's own (addMapValues).
	wf.ExecutionID = v1alpha1.WorkflowExecutionIdentifier{WorkflowExecutionIdentifier: execID}
	wf.Labels = mergeInto(wf.Labels, exec.Labels)
	wf.Annotations = mergeInto(wf.Annotations, exec.Annotations)
	if wf.WorkflowMeta == nil {
		wf.WorkflowMeta = &v1alpha1.WorkflowMeta{}
	}
	wf.WorkflowMeta.EventVersion = v1alpha1.EventVersion2
	wf.RawOutputDataConfig = v1alpha1.RawOutputDataConfig{RawOutputDataConfig: &adminRawOutputDataConfig}
	// What the API server assigns when flyteadmin creates the FlyteWorkflow.
	wf.UID = types.UID(generator.WorkflowUID)
	return wf, nil
}

// mergeInto copies overrides into base, like flyteadmin's addMapValues.
func mergeInto(base, overrides map[string]string) map[string]string {
	if base == nil {
		base = map[string]string{}
	}
	for k, v := range overrides {
		base[k] = v
	}
	return base
}

// newTaskExecutionContext builds the task execution context that
// flytepropeller's task handler gives a plugin for the first attempt of node
// n0 of wf. flytepropeller builds it from a node execution context that
// needs a running controller, so its pieces are put together here from the
// same exported functions: the FlyteWorkflow's status (data and output
// directories), flyteplugins' ioutils (input, output and raw-output paths)
// and encoding (the generated name), and the node labels that
// flytepropeller's nodes.newNodeExecContext adds.
func newTaskExecutionContext(ctx context.Context, wf *v1alpha1.FlyteWorkflow) (pluginscore.TaskExecutionContext, error) {
	store, err := storage.NewDataStore(&storage.Config{Type: storage.TypeMemory}, promutils.NewTestScope())
	if err != nil {
		return nil, fmt.Errorf("creating an in-memory data store: %w", err)
	}

	node, ok := wf.GetNode(generator.NodeID)
	if !ok {
		return nil, fmt.Errorf("the FlyteWorkflow has no node %q", generator.NodeID)
	}
	taskID := node.GetTaskID()
	if taskID == nil {
		return nil, fmt.Errorf("node %q of the FlyteWorkflow is not a task node", generator.NodeID)
	}
	task, err := wf.GetTask(*taskID)
	if err != nil {
		return nil, fmt.Errorf("task of node %q: %w", generator.NodeID, err)
	}
	tmpl := task.CoreTask()

	// flytepropeller's workflow executor: <metadata prefix>/<project>-<domain>-<name>.
	wfDataDir, err := store.ConstructReference(ctx, storage.DataReference(generator.MetadataPrefix),
		fmt.Sprintf("%s-%s-%s", generator.Project, generator.Domain, generator.ExecutionName))
	if err != nil {
		return nil, fmt.Errorf("constructing the workflow data directory: %w", err)
	}
	wf.Status.SetDataDir(wfDataDir)
	wf.DataReferenceConstructor = store
	wf.Status.NodeStatus = map[v1alpha1.NodeID]*v1alpha1.NodeStatus{generator.NodeID: {}}
	nodeStatus := wf.GetNodeExecutionStatus(ctx, generator.NodeID)

	// flytepropeller's node executor writes the node's resolved inputs
	// before the task runs; the plugin reads them to render the container
	// args. The task has no inputs.
	if err := store.WriteProtobuf(ctx, v1alpha1.GetInputsFile(nodeStatus.GetDataDir()), storage.Options{}, &core.LiteralMap{}); err != nil {
		return nil, fmt.Errorf("writing the inputs of node %q: %w", generator.NodeID, err)
	}

	attempt := nodeStatus.GetAttempts()
	uniqueID, err := encoding.FixedLengthUniqueIDForParts(generator.GeneratedNameMaxLength,
		[]string{wf.GetName(), generator.NodeID, strconv.Itoa(int(attempt))})
	if err != nil {
		return nil, fmt.Errorf("generating the task execution name: %w", err)
	}
	shards, err := ioutils.NewBase36PrefixShardSelector(ctx)
	if err != nil {
		return nil, fmt.Errorf("creating the raw output shard selector: %w", err)
	}
	rawOutput, err := ioutils.NewShardedRawOutputPath(ctx, shards,
		storage.DataReference(wf.GetRawOutputDataConfig().GetOutputLocationPrefix()), uniqueID, store)
	if err != nil {
		return nil, fmt.Errorf("constructing the raw output path: %w", err)
	}

	// nodes.newNodeExecContext: the workflow's labels plus node-id, task-name
	// and interruptible.
	labels := map[string]string{}
	for k, v := range wf.GetLabels() {
		labels[k] = v
	}
	labels["node-id"] = propellerutils.SanitizeLabelValue(generator.NodeID)
	labels["task-name"] = propellerutils.SanitizeLabelValue(tmpl.GetId().GetName())
	interruptible := wf.IsInterruptible()
	labels["interruptible"] = strconv.FormatBool(interruptible)

	md := &taskExecutionMetadata{
		wf:            wf,
		node:          node,
		labels:        labels,
		interruptible: interruptible,
		id: &taskcontext.TaskExecutionID{
			Name: uniqueID,
			ID: &core.TaskExecutionIdentifier{
				TaskId:       tmpl.GetId(),
				RetryAttempt: attempt,
				NodeExecutionId: &core.NodeExecutionIdentifier{
					NodeId:      generator.NodeID,
					ExecutionId: wf.GetExecutionID().WorkflowExecutionIdentifier,
				},
			},
			UniqueNodeID: generator.NodeID,
		},
	}
	return taskcontext.New(ctx, md, tmpl, store, nodeStatus.GetDataDir(), nodeStatus.GetOutputDir(), rawOutput), nil
}

// taskExecutionMetadata is flytepropeller's task.taskExecutionMetadata on top
// of nodes.nodeExecMetadata: the FlyteWorkflow answers for the execution,
// the node for the overrides.
type taskExecutionMetadata struct {
	wf            *v1alpha1.FlyteWorkflow
	node          v1alpha1.ExecutableNode
	labels        map[string]string
	interruptible bool
	id            *taskcontext.TaskExecutionID
}

func (m *taskExecutionMetadata) GetOwnerID() types.NamespacedName {
	return types.NamespacedName{Name: m.wf.GetName(), Namespace: m.wf.GetNamespace()}
}
func (m *taskExecutionMetadata) GetTaskExecutionID() pluginscore.TaskExecutionID { return m.id }
func (m *taskExecutionMetadata) GetNamespace() string                            { return m.wf.GetNamespace() }
func (m *taskExecutionMetadata) GetOwnerReference() metav1.OwnerReference {
	return m.wf.GetOwnerReference()
}
func (m *taskExecutionMetadata) GetOverrides() pluginscore.TaskOverrides { return m.node }
func (m *taskExecutionMetadata) GetLabels() map[string]string            { return m.labels }
func (m *taskExecutionMetadata) GetMaxAttempts() uint32                  { return 1 }
func (m *taskExecutionMetadata) GetAnnotations() map[string]string       { return m.wf.GetAnnotations() }
func (m *taskExecutionMetadata) GetK8sServiceAccount() string            { return m.wf.GetServiceAccountName() }
func (m *taskExecutionMetadata) GetSecurityContext() core.SecurityContext {
	return m.wf.GetSecurityContext()
}
func (m *taskExecutionMetadata) IsInterruptible() bool { return m.interruptible }
func (m *taskExecutionMetadata) GetPlatformResources() *corev1.ResourceRequirements {
	return &corev1.ResourceRequirements{}
}
func (m *taskExecutionMetadata) GetInterruptibleFailureThreshold() int32 { return 0 }
func (m *taskExecutionMetadata) GetEnvironmentVariables() map[string]string {
	return m.wf.GetExecutionConfig().EnvironmentVariables
}

// GetConsoleURL is the FlyteWorkflow's console URL, on the releases whose
// FlyteWorkflow has one (v1.16; v1.9's plugins do not ask).
func (m *taskExecutionMetadata) GetConsoleURL() string {
	if wf, ok := any(m.wf).(interface{ GetConsoleURL() string }); ok {
		return wf.GetConsoleURL()
	}
	return ""
}

// setupContext is what flytepropeller hands a plugin manager at start-up,
// with a fake client in place of the cluster.
type setupContext struct{ client client.Client }

func (s setupContext) EnqueueOwner() pluginscore.EnqueueOwner {
	return func(types.NamespacedName) error { return nil }
}
func (s setupContext) OwnerKind() string                        { return v1alpha1.FlyteWorkflowKind }
func (s setupContext) MetricsScope() promutils.Scope            { return promutils.NewTestScope() }
func (s setupContext) KubeClient() pluginscore.KubeClient       { return kubeClient{client: s.client} }
func (s setupContext) SecretManager() pluginscore.SecretManager { return nil }
func (s setupContext) ResourceRegistrar() pluginscore.ResourceRegistrar {
	return nil
}

// kubeClient pairs the fake client with flytepropeller's own fake informer
// cache, which the plugin manager only watches.
type kubeClient struct{ client client.Client }

func (k kubeClient) GetClient() client.Client { return k.client }
func (k kubeClient) GetCache() cache.Cache    { return &mocks.FakeInformers{} }
