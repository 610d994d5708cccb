// Package taskcontext is the part of flytepropeller's
// task.taskExecutionContext that building and launching a k8s resource
// uses, for a task's first attempt: what both of the generator's backends
// (../plugin and ../propeller) hand flyteplugins, around the metadata each
// builds its own way.
package taskcontext

import (
	"context"
	"fmt"

	"github.com/flyteorg/flyte/flyteidl/gen/pb-go/flyteidl/core"
	pluginscatalog "github.com/flyteorg/flyte/flyteplugins/go/tasks/pluginmachinery/catalog"
	pluginscore "github.com/flyteorg/flyte/flyteplugins/go/tasks/pluginmachinery/core"
	"github.com/flyteorg/flyte/flyteplugins/go/tasks/pluginmachinery/encoding"
	pluginsio "github.com/flyteorg/flyte/flyteplugins/go/tasks/pluginmachinery/io"
	"github.com/flyteorg/flyte/flyteplugins/go/tasks/pluginmachinery/ioutils"
	"github.com/flyteorg/flyte/flytestdlib/storage"
)

// New returns the task execution context of tmpl with md, reading the
// node's inputs from dataDir and writing its outputs under outputDir and
// rawOutput, as flytepropeller's task handler builds it.
func New(ctx context.Context, md pluginscore.TaskExecutionMetadata, tmpl *core.TaskTemplate, store *storage.DataStore,
	dataDir, outputDir storage.DataReference, rawOutput pluginsio.RawOutputPaths) pluginscore.TaskExecutionContext {
	return &taskExecutionContext{
		md:     md,
		tmpl:   tmpl,
		path:   dataDir + "/task.pb",
		store:  store,
		inputs: ioutils.NewRemoteFileInputReader(ctx, store, ioutils.NewInputFilePaths(ctx, store, dataDir)),
		outputs: ioutils.NewBufferedOutputWriter(ctx,
			ioutils.NewCheckpointRemoteFilePaths(ctx, store, outputDir, rawOutput, "")),
	}
}

type taskExecutionContext struct {
	md      pluginscore.TaskExecutionMetadata
	tmpl    *core.TaskTemplate
	path    storage.DataReference
	store   *storage.DataStore
	inputs  pluginsio.InputReader
	outputs pluginsio.OutputWriter
	state   pluginState
}

func (t *taskExecutionContext) ResourceManager() pluginscore.ResourceManager { return nil }
func (t *taskExecutionContext) SecretManager() pluginscore.SecretManager     { return nil }
func (t *taskExecutionContext) TaskRefreshIndicator() pluginscore.SignalAsync {
	return func(context.Context) {}
}
func (t *taskExecutionContext) DataStore() *storage.DataStore                    { return t.store }
func (t *taskExecutionContext) PluginStateReader() pluginscore.PluginStateReader { return &t.state }
func (t *taskExecutionContext) TaskReader() pluginscore.TaskReader {
	return taskReader{tmpl: t.tmpl, path: t.path}
}
func (t *taskExecutionContext) InputReader() pluginsio.InputReader { return t.inputs }
func (t *taskExecutionContext) TaskExecutionMetadata() pluginscore.TaskExecutionMetadata {
	return t.md
}
func (t *taskExecutionContext) OutputWriter() pluginsio.OutputWriter             { return t.outputs }
func (t *taskExecutionContext) PluginStateWriter() pluginscore.PluginStateWriter { return &t.state }
func (t *taskExecutionContext) Catalog() pluginscatalog.AsyncClient              { return nil }
func (t *taskExecutionContext) EventsRecorder() pluginscore.EventsRecorder       { return nil }

// MaxDatasetSizeBytes is asked for by the older releases' interface only;
// neither the mpi plugin nor the plugin manager reads it.
func (t *taskExecutionContext) MaxDatasetSizeBytes() int64 { return 0 }

// taskReader serves the task template.
type taskReader struct {
	tmpl *core.TaskTemplate
	path storage.DataReference
}

func (r taskReader) Read(context.Context) (*core.TaskTemplate, error) { return r.tmpl, nil }
func (r taskReader) Path(context.Context) (storage.DataReference, error) {
	return r.path, nil
}

// pluginState is a first attempt's empty plugin state: Get leaves the
// plugin manager's state at its zero value, PluginPhaseNotStarted, so Handle
// launches the resource.
type pluginState struct{ version uint8 }

func (s *pluginState) GetStateVersion() uint8                 { return s.version }
func (s *pluginState) Get(interface{}) (uint8, error)         { return s.version, nil }
func (s *pluginState) Put(version uint8, _ interface{}) error { s.version = version; return nil }
func (s *pluginState) Reset() error                           { s.version = 0; return nil }

// TaskExecutionID is flytepropeller's task.taskExecutionID: Name is the
// generated name, ID the attempt's identifier, UniqueNodeID its node's.
type TaskExecutionID struct {
	Name         string
	ID           *core.TaskExecutionIdentifier
	UniqueNodeID string
}

func (t *TaskExecutionID) GetGeneratedName() string { return t.Name }

func (t *TaskExecutionID) GetGeneratedNameWith(minLength, maxLength int) (string, error) {
	if len(t.Name) < minLength {
		return t.Name + fmt.Sprintf("%0*d", minLength-len(t.Name), 0), nil
	}
	if len(t.Name) > maxLength {
		return encoding.FixedLengthUniqueID(t.Name, maxLength)
	}
	return t.Name, nil
}

// GetID returns a copy of the identifier: the interface returns a value.
func (t *TaskExecutionID) GetID() core.TaskExecutionIdentifier {
	return core.TaskExecutionIdentifier{
		TaskId:          t.ID.GetTaskId(),
		NodeExecutionId: t.ID.GetNodeExecutionId(),
		RetryAttempt:    t.ID.GetRetryAttempt(),
	}
}

func (t *TaskExecutionID) GetUniqueNodeID() string { return t.UniqueNodeID }
