"""A kubelet stand-in for tessera's device plugin test (crates/tessera/tests/k8s.rs).

Built from the kubelet's own .proto files with grpcio-tools (the device plugin API
v1beta1 and plugin registration v1, from scripts/kubelet-protos.sh) and, for the pod
resources API v1 and the DRA plugin API v1 that no registry carries, tessera's
transcriptions (crates/tessera-k8s/proto/podresources.proto and dra.proto).
It does what the kubelet does with a device plugin, over the same sockets:

- serves `v1beta1.Registration` on DIR/device-plugins/kubelet.sock; on a registration,
  dials the plugin's endpoint and follows its `ListAndWatch`;
- serves `v1.PodResourcesLister` on DIR/pod-resources/kubelet.sock, listing the pods
  it admitted;
- admits a pod's container: `GetPreferredAllocation` over the healthy units no pod
  holds, then `Allocate`;
- restarts: its socket removed with every plugin socket in the directory (as the
  kubelet's device manager does when it starts), then made anew;
- finds a DRA driver by its socket in DIR/plugins_registry (GetInfo, then
  NotifyRegistrationStatus, as the kubelet's plugin watcher does) and calls its
  NodePrepareResources and NodeUnprepareResources.

Driven by one command per line on stdin, each answered by one JSON line on stdout:
  wait_registered N SECONDS   until N registrations in all
  devices                     the plugin's last ListAndWatch list
  wait_health ID HEALTH SECONDS
  allocate POD NAMESPACE CONTAINER SIZE
  delete POD
  restart
  dra_register SECONDS        find the DRA driver's registration socket, GetInfo, notify
  dra_prepare NAMESPACE NAME UID / dra_unprepare NAMESPACE NAME UID
  quit
"""

import json
import os
import sys
import threading
import time
from concurrent import futures

import grpc
from grpc_tools import protoc


def build(official, ours, root):
    # the generated modules under the kubelet's root, which the test owns and removes
    # (in a temporary directory of their own they outlived every run: the test kills
    # the stand-in, so no cleanup of ours would run)
    out = os.path.join(root, "standin-pb")
    os.makedirs(out, exist_ok=True)
    for include, proto in [
        (official, "deviceplugin/v1beta1/deviceplugin.proto"),
        (official, "pluginregistration/v1/pluginregistration.proto"),
        (ours, "podresources.proto"),
        (ours, "dra.proto"),
    ]:
        rc = protoc.main(
            ["protoc", f"-I{include}", f"--python_out={out}", f"--grpc_python_out={out}", proto]
        )
        if rc != 0:
            sys.exit(f"protoc failed on {proto}")
    sys.path.insert(0, out)
    sys.path.insert(0, os.path.join(out, "deviceplugin", "v1beta1"))
    sys.path.insert(0, os.path.join(out, "pluginregistration", "v1"))


def main():
    official, ours, root, resource = sys.argv[1:5]
    build(official, ours, root)
    import deviceplugin_pb2 as dp
    import deviceplugin_pb2_grpc as dp_grpc
    import podresources_pb2 as pr
    import podresources_pb2_grpc as pr_grpc
    import pluginregistration_pb2 as reg
    import pluginregistration_pb2_grpc as reg_grpc
    import dra_pb2 as dra
    import dra_pb2_grpc as dra_grpc

    plugin_dir = os.path.join(root, "device-plugins")
    registry_dir = os.path.join(root, "plugins_registry")
    pr_dir = os.path.join(root, "pod-resources")
    os.makedirs(plugin_dir, exist_ok=True)
    os.makedirs(pr_dir, exist_ok=True)
    lock = threading.Condition()
    state = {"registrations": [], "devices": {}, "pods": {}, "plugin": None}

    def follow(endpoint):
        # the kubelet dials the plugin and follows its device list for as long as it runs
        # :authority "localhost", as the kubelet sends since 1.26 (kubernetes#112597);
        # gRPC's C core would send the socket's path, which HTTP/2 servers as strict as
        # tonic's (h2) refuse, as they refuse older kubelets
        channel = grpc.insecure_channel(
            "unix://" + os.path.join(plugin_dir, endpoint),
            options=[("grpc.default_authority", "localhost")],
        )
        stub = dp_grpc.DevicePluginStub(channel)
        with lock:
            state["plugin"] = stub
        try:
            for resp in stub.ListAndWatch(dp.Empty()):
                with lock:
                    state["devices"] = {d.ID: d.health for d in resp.devices}
                    lock.notify_all()
        except grpc.RpcError as e:
            # the plugin went away (it restarts, or the stand-in does): it registers again
            print(f"ListAndWatch of {endpoint} ended: {e.code().name}: {e.details()}", file=sys.stderr)

    class Registration(dp_grpc.RegistrationServicer):
        def Register(self, request, context):
            if request.version != "v1beta1":
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "unsupported version")
            with lock:
                state["registrations"].append(
                    {
                        "at": time.monotonic(),
                        "endpoint": request.endpoint,
                        "resource": request.resource_name,
                        "preferred": request.options.get_preferred_allocation_available,
                    }
                )
                lock.notify_all()
            threading.Thread(target=follow, args=(request.endpoint,), daemon=True).start()
            return dp.Empty()

    class Lister(pr_grpc.PodResourcesListerServicer):
        def List(self, request, context):
            with lock:
                pods = [
                    pr.PodResources(
                        name=name,
                        namespace=p["namespace"],
                        containers=[
                            pr.ContainerResources(
                                name=p["container"],
                                devices=[
                                    pr.ContainerDevices(resource_name=resource, device_ids=p["units"])
                                ],
                            )
                        ],
                    )
                    for name, p in state["pods"].items()
                ]
            return pr.ListPodResourcesResponse(pod_resources=pods)

    def serve_registration():
        sock = os.path.join(plugin_dir, "kubelet.sock")
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        dp_grpc.add_RegistrationServicer_to_server(Registration(), server)
        server.add_insecure_port("unix://" + sock)
        server.start()
        return server

    lister = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pr_grpc.add_PodResourcesListerServicer_to_server(Lister(), lister)
    lister.add_insecure_port("unix://" + os.path.join(pr_dir, "kubelet.sock"))
    lister.start()
    registration = serve_registration()

    def dial(path):
        # :authority "localhost", as the kubelet sends since 1.26 (see follow)
        return grpc.insecure_channel("unix://" + path, options=[("grpc.default_authority", "localhost")])

    def answer(obj):
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    def wait(pred, seconds):
        deadline = time.monotonic() + seconds
        with lock:
            while not pred():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                lock.wait(left)
        return True

    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        cmd, args = words[0], words[1:]
        try:
            if cmd == "wait_registered":
                n, seconds = int(args[0]), float(args[1])
                ok = wait(lambda: len(state["registrations"]) >= n, seconds)
                with lock:
                    answer({"ok": ok, "registrations": state["registrations"], "now": time.monotonic()})
            elif cmd == "devices":
                with lock:
                    answer({"devices": state["devices"]})
            elif cmd == "wait_health":
                unit, health, seconds = args[0], args[1], float(args[2])
                ok = wait(lambda: state["devices"].get(unit) == health, seconds)
                with lock:
                    answer({"ok": ok, "devices": state["devices"]})
            elif cmd == "allocate":
                pod, namespace, container, size = args[0], args[1], args[2], int(args[3])
                with lock:
                    held = {u for p in state["pods"].values() for u in p["units"]}
                    free = sorted(u for u, h in state["devices"].items() if h == "Healthy" and u not in held)
                    stub = state["plugin"]
                pref = stub.GetPreferredAllocation(
                    dp.PreferredAllocationRequest(
                        container_requests=[
                            dp.ContainerPreferredAllocationRequest(
                                available_deviceIDs=free, must_include_deviceIDs=[], allocation_size=size
                            )
                        ]
                    )
                )
                chosen = list(pref.container_responses[0].deviceIDs) or free[:size]
                if len(chosen) < size:
                    answer({"error": f"only {len(free)} units free"})
                    continue
                resp = stub.Allocate(
                    dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devicesIDs=chosen)])
                )
                c = resp.container_responses[0]
                with lock:
                    state["pods"][pod] = {"namespace": namespace, "container": container, "units": chosen}
                answer(
                    {
                        "units": chosen,
                        "envs": dict(c.envs),
                        "mounts": [
                            {"container_path": m.container_path, "host_path": m.host_path, "read_only": m.read_only}
                            for m in c.mounts
                        ],
                        "devices": [
                            {"container_path": d.container_path, "host_path": d.host_path} for d in c.devices
                        ],
                        "annotations": dict(c.annotations),
                    }
                )
            elif cmd == "delete":
                with lock:
                    state["pods"].pop(args[0], None)
                answer({"ok": True, "now": time.monotonic()})
            elif cmd == "restart":
                registration.stop(None).wait()
                for f in os.listdir(plugin_dir):
                    os.unlink(os.path.join(plugin_dir, f))
                with lock:
                    state["devices"] = {}
                    state["plugin"] = None
                registration = serve_registration()
                answer({"ok": True, "now": time.monotonic()})
            elif cmd == "dra_register":
                # the kubelet's plugin watcher: a socket appears in plugins_registry
                # (a socket a killed driver left answers nothing: tried again, as the
                # kubelet's watcher does, until the deadline)
                deadline = time.monotonic() + float(args[0])
                info, why = None, "no registration socket"
                while info is None and time.monotonic() < deadline:
                    socks = [f for f in sorted(os.listdir(registry_dir)) if f.endswith(".sock")] if os.path.isdir(registry_dir) else []
                    if socks:
                        stub = reg_grpc.RegistrationStub(dial(os.path.join(registry_dir, socks[0])))
                        try:
                            info = stub.GetInfo(reg.InfoRequest(), timeout=1)
                            break
                        except grpc.RpcError as e:
                            why = f"{e.code().name}: {e.details()}"
                    time.sleep(0.05)
                if info is None:
                    answer({"error": why})
                    continue
                stub.NotifyRegistrationStatus(reg.RegistrationStatus(plugin_registered=True))
                state["dra"] = dra_grpc.DRAPluginStub(dial(info.endpoint))
                answer({"type": info.type, "name": info.name, "endpoint": info.endpoint,
                        "versions": list(info.supported_versions)})
            elif cmd in ("dra_prepare", "dra_unprepare"):
                claim = dra.Claim(namespace=args[0], name=args[1], uid=args[2])
                if cmd == "dra_prepare":
                    r = state["dra"].NodePrepareResources(dra.NodePrepareResourcesRequest(claims=[claim]))
                    c = r.claims[args[2]]
                    answer({"error": c.error, "devices": [
                        {"requests": list(d.request_names), "pool": d.pool_name, "device": d.device_name,
                         "cdi": list(d.cdi_device_ids)} for d in c.devices]})
                else:
                    r = state["dra"].NodeUnprepareResources(dra.NodeUnprepareResourcesRequest(claims=[claim]))
                    answer({"error": r.claims[args[2]].error})
            elif cmd == "quit":
                answer({"ok": True})
                break
            else:
                answer({"error": f"unknown command {cmd}"})
        except grpc.RpcError as e:
            answer({"error": f"{e.code().name}: {e.details()}"})
    registration.stop(None)
    lister.stop(None)


if __name__ == "__main__":
    main()
