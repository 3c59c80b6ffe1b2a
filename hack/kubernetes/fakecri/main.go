// Command gpudra-fake-cri serves Kubernetes' own fake container runtime (k8s.io/cri-client/pkg/fake, the
// in-memory RuntimeService and ImageService that kubemark's hollow nodes run) on a unix socket, for a real kubelet
// on a simulated gpudra node. Sandboxes and containers are accepted and reported running; nothing is executed.
//
// Every call that changes a pod's sandboxes or containers is appended to the --record file as one JSON line:
// {"method": ..., "request": ..., "response": ..., "error": ...}, the messages in protobuf's JSON form with the
// .proto field names (so a CreateContainer line shows "CDI_devices" exactly as the kubelet sent it).
//
// Built by hack/kubernetes/build.sh against the cri-api and cri-client of the Kubernetes version it serves.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
	"k8s.io/cri-client/pkg/util"
)

var recorded = map[string]bool{
	"RunPodSandbox":    true,
	"StopPodSandbox":   true,
	"RemovePodSandbox": true,
	"CreateContainer":  true,
	"StartContainer":   true,
	"StopContainer":    true,
	"RemoveContainer":  true,
}

type recorder struct {
	mu  sync.Mutex
	out *os.File
}

func asJSON(message any) json.RawMessage {
	m, ok := message.(proto.Message)
	if !ok || m == nil {
		return json.RawMessage("null")
	}
	data, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return json.RawMessage("null")
	}
	return data
}

func (r *recorder) intercept(
	ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler,
) (any, error) {
	resp, err := handler(ctx, req)
	method := info.FullMethod[strings.LastIndex(info.FullMethod, "/")+1:]
	if !recorded[method] {
		return resp, err
	}
	line := map[string]any{"method": method, "request": asJSON(req), "response": asJSON(resp), "error": ""}
	if err != nil {
		line["error"] = err.Error()
	}
	data, merr := json.Marshal(line)
	if merr == nil {
		r.mu.Lock()
		_, _ = r.out.Write(append(data, '\n'))
		r.mu.Unlock()
	}
	return resp, err
}

func main() {
	socket := flag.String("socket", "", "path of the unix socket to serve on")
	record := flag.String("record", "", "file that every sandbox and container call is appended to (JSON lines)")
	flag.Parse()
	if *socket == "" || *record == "" {
		fmt.Fprintln(os.Stderr, "usage: gpudra-fake-cri --socket PATH --record FILE")
		os.Exit(2)
	}
	out, err := os.OpenFile(*record, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	runtime := fake.NewFakeRemoteRuntime()
	// The kubelet refuses an image whose size is 0 ("Id or size of image ... is not set") once it has it.
	runtime.ImageService.SetFakeImageSize(1 << 20)
	runtime.RuntimeService.FakeStatus = &runtimeapi.RuntimeStatus{
		Conditions: []*runtimeapi.RuntimeCondition{
			{Type: runtimeapi.RuntimeReady, Status: true},
			{Type: runtimeapi.NetworkReady, Status: true},
		},
	}
	server := grpc.NewServer(grpc.ChainUnaryInterceptor((&recorder{out: out}).intercept))
	runtimeapi.RegisterRuntimeServiceServer(server, runtime)
	runtimeapi.RegisterImageServiceServer(server, runtime)
	listener, err := util.CreateListener("unix://" + *socket)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		server.Stop()
	}()
	fmt.Fprintf(os.Stderr, "gpudra-fake-cri serving on %s, recording to %s\n", *socket, *record)
	if err := server.Serve(listener); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
