package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// runUnregister deletes the webhook's MutatingWebhookConfiguration, so that
// the API server stops calling the webhook before its pods and Service go:
// what the chart's pre-delete hook runs. Helm 3 deletes a
// MutatingWebhookConfiguration last, after the Service, and each create in
// between would be refused under failurePolicy Fail.
func runUnregister(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := subcommandFlags("unregister", "usage: webhook unregister --name NAME [--settle DURATION]\n\n"+
		"Deletes the MutatingWebhookConfiguration NAME, then waits --settle for every API server to stop calling\n"+
		"the webhook; one already gone is no error. It needs to delete that one configuration, and reads the\n"+
		"API server's address and credentials as kubectl does (KUBECONFIG, or the Pod's account).", stderr)
	name := fs.String("name", "", "the MutatingWebhookConfiguration to delete")
	settle := fs.Duration("settle", 2*time.Second, "how long to wait, once it is deleted, for every API server's "+
		"copy of the webhook configurations to drop it")
	timeout := fs.Duration("timeout", 30*time.Second, "how long the deletion may take")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unregister takes no arguments, got %q", fs.Args())
	}
	if *name == "" {
		return errors.New("--name is required: the MutatingWebhookConfiguration to delete")
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	deleted, err := unregister(ctx, c, *name)
	if err != nil {
		return err
	}
	if !deleted {
		fmt.Fprintf(stdout, "MutatingWebhookConfiguration %s: already gone\n", *name)
		return nil
	}
	// Each API server drops the configuration from its cache a moment after
	// the deletion: until then it may still call the webhook.
	time.Sleep(*settle)
	fmt.Fprintf(stdout, "MutatingWebhookConfiguration %s: deleted, and %s waited for the API servers to stop calling the webhook\n", *name, *settle)
	return nil
}

// unregister deletes the MutatingWebhookConfiguration name, and says
// whether there was one to delete.
func unregister(ctx context.Context, c client.Client, name string) (bool, error) {
	hook := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}
	err := c.Delete(ctx, hook)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("deleting the MutatingWebhookConfiguration %s: %w", name, err)
	}
	return true, nil
}
