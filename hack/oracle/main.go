// Command gpudra-allocator-oracle answers allocation scenarios with Kubernetes' own structured allocator
// (k8s.io/dynamic-resource-allocation/structured), the code kube-scheduler runs, so gpudra's allocator can be
// checked against it.
//
// It reads one scenario per line on stdin and writes one answer per line on stdout, until stdin closes:
//
//	{"id": "...", "node": {"name": "n1", "labels": {}}, "slices": [ResourceSlice...],
//	 "classes": [DeviceClass...], "claims": [ResourceClaim...], "allocated": [DeviceRequestAllocationResult...],
//	 "listTypeAttributes": false}
//
//	{"id": "...", "outcome": "allocated" | "unschedulable" | "error", "message": "...",
//	 "allocations": [AllocationResult...], "implementation": "*incubating.Allocator", "version": "v0.37.2"}
//
// Objects are resource.k8s.io/v1 JSON, decoded strictly (an unknown field is an error, so a field the caller
// misspells cannot silently drop out). "allocated" lists the results of claims allocated before, as they
// stand in their status.allocation; they become the allocator's AllocatedState the way kube-scheduler builds
// it. "unschedulable" is what kube-scheduler turns into an Unschedulable status for the node (no solution,
// or an error wrapping ErrFailedAllocationOnNode); "error" is any other error, which makes kube-scheduler
// abort the pod's scheduling attempt (a CEL runtime error, a missing class, ...). "listTypeAttributes" turns
// DRAListTypeAttributes on for that scenario (features.go).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

type nodeInfo struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
}

type scenario struct {
	ID        string                                      `json:"id"`
	Node      nodeInfo                                    `json:"node"`
	Slices    []*resourceapi.ResourceSlice                `json:"slices"`
	Classes   []*resourceapi.DeviceClass                  `json:"classes"`
	Claims    []*resourceapi.ResourceClaim                `json:"claims"`
	Allocated []resourceapi.DeviceRequestAllocationResult `json:"allocated"`
	// ListTypeAttributes: allocate with DRAListTypeAttributes on (list-typed attributes, includes() in CEL).
	ListTypeAttributes bool `json:"listTypeAttributes,omitempty"`
}

// caches holds one CEL cache per set of CEL features a scenario may ask for.
type caches struct {
	scalar, list *cel.Cache
}

type answer struct {
	ID             string                         `json:"id"`
	Outcome        string                         `json:"outcome"`
	Message        string                         `json:"message,omitempty"`
	Allocations    []resourceapi.AllocationResult `json:"allocations,omitempty"`
	Implementation string                         `json:"implementation,omitempty"`
	Version        string                         `json:"version"`
}

// classLister serves DeviceClasses from the scenario, answering NotFound like an informer lister.
type classLister map[string]*resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(l))
	for _, c := range l {
		out = append(out, c)
	}
	return out, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if c, ok := l[name]; ok {
		return c, nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}

// allocatedState turns earlier allocation results into what kube-scheduler's claim tracker hands the
// allocator with DRAConsumableCapacity on: adminAccess results hold nothing, a result with a shareID is one
// share of a multi-allocatable device (its consumed capacity adds up per device), any other result holds
// its device exclusively.
func allocatedState(results []resourceapi.DeviceRequestAllocationResult) structured.AllocatedState {
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, r := range results {
		if r.AdminAccess != nil && *r.AdminAccess {
			continue
		}
		id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
		if r.ShareID == nil {
			state.AllocatedDevices.Insert(id)
			continue
		}
		state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
		if r.ConsumedCapacity != nil {
			state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
		}
	}
	return state
}

func solve(ctx context.Context, s *scenario, celCaches caches) (a answer) {
	a = answer{ID: s.ID, Version: allocatorVersion}
	defer func() {
		if p := recover(); p != nil {
			a.Outcome, a.Message = "error", fmt.Sprintf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	classes := classLister{}
	for _, c := range s.Classes {
		classes[c.Name] = c
	}
	enabled, celCache := features, celCaches.scalar
	if s.ListTypeAttributes {
		enabled, celCache = listFeatures, celCaches.list
	}
	allocator, err := structured.NewAllocator(ctx, enabled, allocatedState(s.Allocated), classes, s.Slices, celCache)
	if err != nil {
		a.Outcome, a.Message = "error", err.Error()
		return a
	}
	a.Implementation = fmt.Sprintf("%T", allocator)
	node := &v1.Node{}
	node.Name, node.Labels = s.Node.Name, s.Node.Labels
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second) // kube-scheduler's default filter timeout
	defer cancel()
	results, err := allocator.Allocate(ctx, node, s.Claims)
	switch {
	case errors.Is(err, structured.ErrFailedAllocationOnNode):
		a.Outcome, a.Message = "unschedulable", err.Error()
	case err != nil:
		a.Outcome, a.Message = "error", err.Error()
	case results == nil:
		a.Outcome = "unschedulable"
	default:
		a.Outcome, a.Allocations = "allocated", results
	}
	return a
}

func main() {
	celCaches := caches{scalar: cel.NewCache(64, celFeatures), list: cel.NewCache(64, listCelFeatures)}
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	out := bufio.NewWriter(os.Stdout)
	encoder := json.NewEncoder(out)
	for {
		line, err := in.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var s scenario
			decoder := json.NewDecoder(bytes.NewReader(line))
			decoder.DisallowUnknownFields()
			var a answer
			if derr := decoder.Decode(&s); derr != nil {
				a = answer{ID: s.ID, Outcome: "invalid", Message: derr.Error(), Version: allocatorVersion}
			} else {
				a = solve(context.Background(), &s, celCaches)
			}
			if eerr := encoder.Encode(a); eerr != nil {
				fmt.Fprintln(os.Stderr, "write answer:", eerr)
				os.Exit(1)
			}
			if ferr := out.Flush(); ferr != nil {
				fmt.Fprintln(os.Stderr, "write answer:", ferr)
				os.Exit(1)
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return
			}
			fmt.Fprintln(os.Stderr, "read scenario:", err)
			os.Exit(1)
		}
	}
}
