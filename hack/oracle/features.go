package main

import (
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// allocatorVersion is the k8s.io/dynamic-resource-allocation release in go.mod (Kubernetes 1.37.2).
const allocatorVersion = "v0.37.2"

// features are the allocator features kube-scheduler 1.37 passes with the DRA feature gates gpudra's control
// plane turns on (hack/kubernetes, gpudra.cluster.kubernetes.flags) and those on by default in 1.37
// (DRAFractionalCapacityRange). Passing fewer would make structured.NewAllocator pick an implementation that
// ignores partitionable devices or consumable capacity.
var features = structured.Features{
	AdminAccess:             true,
	ConsumableCapacity:      true,
	DeviceBindingAndStatus:  true,
	DeviceTaints:            true,
	FractionalCapacityRange: true,
	PartitionableDevices:    true,
	PrioritizedList:         true,
}

// celFeatures are those kube-scheduler 1.37 compiles selectors with under the same gates.
var celFeatures = cel.Features{EnableConsumableCapacity: true}

// The same with DRAListTypeAttributes (alpha in 1.36 and 1.37) also on, for a scenario that asks for it
// ("listTypeAttributes": true): only the experimental implementation supports list-typed attributes, so the others
// keep the implementation kube-scheduler 1.37 runs with its default alpha gates off.
var listFeatures = withListTypeAttributes(features)

var listCelFeatures = cel.Features{EnableConsumableCapacity: true, EnableListTypeAttributes: true}

func withListTypeAttributes(f structured.Features) structured.Features {
	f.ListTypeAttributes = true
	return f
}
