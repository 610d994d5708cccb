package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// TestPartialClientHello checks that the records hold one ClientHello
// handshake message that declares the size asked for and lacks its last
// byte, in records no larger than TLS allows.
func TestPartialClientHello(t *testing.T) {
	const size = 64 << 10
	records := partialClientHello(size)
	var msg []byte
	for len(records) > 0 {
		if len(records) < 5 || records[0] != 22 {
			t.Fatalf("not a handshake record: % x", records[:min(5, len(records))])
		}
		n := int(records[3])<<8 | int(records[4])
		if n > 1<<14 || 5+n > len(records) {
			t.Fatalf("a record of %d bytes, with %d left", n, len(records)-5)
		}
		msg, records = append(msg, records[5:5+n]...), records[5+n:]
	}
	declared := int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3])
	got := struct{ Type, Declared, Sent int }{int(msg[0]), 4 + declared, len(msg)}
	if diff := cmp.Diff(struct{ Type, Declared, Sent int }{1, size, size - 1}, got); diff != "" {
		t.Errorf("ClientHello (-want +got):\n%s", diff)
	}
}

// TestAttackReviews decodes each review an attack posts and checks that it
// holds what the attack says.
func TestAttackReviews(t *testing.T) {
	tests := []struct {
		name   string
		review []byte
		check  func(t *testing.T, size int, worker corev1.PodSpec, annotations map[string]string)
	}{
		{"empty containers", emptyContainersReview(1000), func(t *testing.T, _ int, worker corev1.PodSpec, _ map[string]string) {
			if len(worker.Containers) != 1001 || worker.Containers[0].Name != "mpi" || !cmp.Equal(worker.Containers[1000], corev1.Container{}) {
				t.Errorf("%d Worker containers, the first %q, want mpi and 1000 empty ones", len(worker.Containers), worker.Containers[0].Name)
			}
		}},
		{"escaped args", escapedArgsReview(1 << 20), func(t *testing.T, size int, worker corev1.PodSpec, _ map[string]string) {
			args := worker.Containers[0].Args
			if size != 1<<20 || len(args) != 1 || strings.Trim(args[0], "<") != "" {
				t.Errorf("a review of %d bytes, Worker args of %d, want 1 MiB and one arg of '<'", size, len(args))
			}
		}},
		{"control bytes", controlBytesReview(64 << 10), func(t *testing.T, _ int, _ corev1.PodSpec, annotations map[string]string) {
			line := annotations["mpi.flyte.org/worker-spec-command"]
			if len(line) != 64<<10 || strings.IndexFunc(line, func(r rune) bool { return r < 1 || r > 31 }) >= 0 {
				t.Errorf("a worker-spec-command of %d bytes, want 64 KiB of U+0001 to U+001F", len(line))
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var review admissionv1.AdmissionReview
			if err := json.Unmarshal(tt.review, &review); err != nil {
				t.Fatal(err)
			}
			var job struct {
				Metadata struct{ Annotations map[string]string }
				Spec     struct {
					MPIReplicaSpecs struct {
						Worker struct{ Template corev1.PodTemplateSpec }
					}
				}
			}
			if err := json.Unmarshal(review.Request.Object.Raw, &job); err != nil {
				t.Fatal(err)
			}
			tt.check(t, len(tt.review), job.Spec.MPIReplicaSpecs.Worker.Template.Spec, job.Metadata.Annotations)
		})
	}
}

// TestManyLabelsReview checks that the many-labels review keeps the Flyte
// job's labels, which the selector matches, beside the keys added.
func TestManyLabelsReview(t *testing.T) {
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(manyLabelsReview(1000), &review); err != nil {
		t.Fatal(err)
	}
	var job struct {
		Metadata struct{ Labels map[string]string }
	}
	if err := json.Unmarshal(review.Request.Object.Raw, &job); err != nil {
		t.Fatal(err)
	}
	flyte := must(fixtures.FlyteJob("v1", fixtures.HorovodWorkerCommand)).GetLabels()
	if got, want := len(job.Metadata.Labels), len(flyte)+1000; got != want || job.Metadata.Labels["execution-id"] != flyte["execution-id"] {
		t.Errorf("%d labels, execution-id %q; want %d and %q", got, job.Metadata.Labels["execution-id"], want, flyte["execution-id"])
	}
}
