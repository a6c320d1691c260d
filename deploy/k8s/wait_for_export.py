#!/usr/bin/env python3
"""Wait for the export Job of deploy/k8s, and stop at once when waiting cannot end well.

    python3 deploy/k8s/wait_for_export.py [-n tritonkit] [--timeout 2h]

Exit 0 when the Job is complete; 1, with one line naming the problem and the fix, when the Job failed,
when its claim model-repository cannot bind (a StorageClass that refuses the access mode, no class at all),
when the claim stays Pending past --pending-limit, or at --timeout; 2 when kubectl cannot be run or cannot
reach the cluster. `kubectl wait` waits for one condition only (kubectl 1.37 still cannot wait for
"complete or failed"; its own help suggests a shell loop), so `kubectl wait --for=condition=complete`
waits out its whole timeout on a failed Job or an unbound claim. This polls `kubectl get -o json`
instead, and needs only the standard library and any kubectl.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone

JOB = "export"
CLAIM = "model-repository"
OVERLAYS = "deploy/k8s/overlays/<gpu|gpu-single-node|cpu>/export"
# Provisioner errors that no retry mends: the class cannot give the access mode, or does not exist.
PERMANENT = re.compile(
    r"access ?mode|ReadWrite(Once|Many)|multi[- ]?(node|writer)|not supported|unsupported|"
    r'storageclass\.storage\.k8s\.io "[^"]*" not found',
    re.I,
)
PROVISIONING_GRACE_S = 120  # other provisioning errors: retried by the provisioner, given two minutes


@dataclass(frozen=True)
class Verdict:
    state: str  # "complete", "failed" or "waiting"
    line: str


def _condition(obj: dict, kind: str) -> dict | None:
    for condition in obj.get("status", {}).get("conditions", []) or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return condition
    return None


def _when(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _event_time(event: dict) -> datetime:
    for key in ("lastTimestamp", "eventTime", "firstTimestamp"):
        if event.get(key):
            return _when(event[key])
    return _when(event["metadata"]["creationTimestamp"])


def claim_verdict(claim: dict, events: list[dict], namespace: str, now: datetime, pending_limit_s: float) -> Verdict:
    """Whether the model repository's claim can still bind: a "failed" verdict ends the wait."""
    ns = f"kubectl -n {namespace}"
    phase = claim.get("status", {}).get("phase", "Pending")
    if phase == "Bound":
        return Verdict("waiting", f"claim {CLAIM} is bound")
    if phase == "Lost":
        return Verdict("failed", f"claim {CLAIM} lost its volume: {ns} describe pvc {CLAIM}")
    modes = claim.get("spec", {}).get("accessModes", [])
    storage_class = claim.get("spec", {}).get("storageClassName")
    age = (now - _when(claim["metadata"]["creationTimestamp"])).total_seconds()
    which = f'StorageClass "{storage_class}"' if storage_class else "the default StorageClass"
    fix_class = (
        "On one node apply deploy/k8s/overlays/gpu-single-node/export instead (ReadWriteOnce); across nodes "
        "name a shared-filesystem class (NFS, EFS, Filestore, Azure Files, CephFS) in "
        "deploy/k8s/components/storage-class and uncomment it in the export stage (kubectl get storageclass)"
        if "ReadWriteMany" in modes
        else "Name a class that provisions it in deploy/k8s/components/storage-class (kubectl get storageclass)"
    )
    rerun = f"then {ns} delete pvc {CLAIM} job/{JOB} and apply the export stage again."
    events = sorted(events, key=_event_time, reverse=True)
    for event in events:
        reason, message = event.get("reason", ""), " ".join(str(event.get("message", "")).split())
        if reason == "ProvisioningFailed" and (PERMANENT.search(message) or age >= PROVISIONING_GRACE_S):
            return Verdict(
                "failed",
                f"claim {CLAIM} ({'/'.join(modes)}) cannot be provisioned by {which}: {message}. {fix_class}; {rerun}",
            )
        if reason == "FailedBinding" and "no storage class is set" in message:
            return Verdict(
                "failed",
                f"claim {CLAIM} cannot bind: {message} (the cluster has no default StorageClass). {fix_class}; {rerun}",
            )
    if events and events[0].get("reason") == "WaitForFirstConsumer":
        # The class binds when the Job's pod is scheduled: what holds the pod is the problem (pod_note).
        return Verdict("waiting", f"claim {CLAIM} binds when the export pod is scheduled")
    if age >= pending_limit_s:
        return Verdict(
            "failed",
            f"claim {CLAIM} still Pending after {age / 60:.0f} min with {which}: {ns} describe pvc {CLAIM} "
            f"says why. {fix_class}.",
        )
    return Verdict("waiting", f"claim {CLAIM} is Pending")


def job_verdict(job: dict | None, namespace: str) -> Verdict:
    ns = f"kubectl -n {namespace}"
    if job is None:
        return Verdict("failed", f"no Job {JOB} in namespace {namespace}: apply the export stage first ({OVERLAYS}).")
    if _condition(job, "Complete"):
        return Verdict("complete", f"Job {JOB} is complete: apply the serving stage (the overlay without /export).")
    failed = _condition(job, "Failed") or _condition(job, "FailureTarget")
    if failed:
        why = ": ".join(x for x in (failed.get("reason"), " ".join(str(failed.get("message", "")).split())) if x)
        return Verdict(
            "failed",
            f"Job {JOB} failed ({why or 'no reason given'}). Its log says why: {ns} logs job/{JOB}. To run it "
            f"again: {ns} delete job {JOB} && kubectl apply -k {OVERLAYS}.",
        )
    return Verdict("waiting", f"Job {JOB} is running")


def pod_note(pods: list[dict], namespace: str) -> str | None:
    """Why the Job's pod does not start, if the scheduler says: printed, never fatal (a GPU may free up)."""
    for pod in pods:
        scheduled = next(
            (c for c in pod.get("status", {}).get("conditions", []) or [] if c.get("type") == "PodScheduled"), None
        )
        if scheduled and scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
            note = f"the export pod cannot be scheduled: {' '.join(str(scheduled.get('message', '')).split())}"
            if "nvidia.com/gpu" in note:
                note += (
                    f" (if Triton holds the GPU: kubectl -n {namespace} scale deployment/triton --replicas=0, "
                    "and back after the export)"
                )
            return note
    return None


def decide(
    job: dict | None,
    claim: dict | None,
    events: list[dict],
    pods: list[dict],
    namespace: str,
    now: datetime,
    pending_limit_s: float,
) -> Verdict:
    """One look at the Job, its claim, the claim's events and the Job's pods: complete, failed or waiting."""
    verdict = job_verdict(job, namespace)
    if verdict.state != "waiting":
        return verdict
    if claim is None:
        return Verdict("failed", f"no claim {CLAIM} in namespace {namespace}: apply the export stage ({OVERLAYS}).")
    claimed = claim_verdict(claim, events, namespace, now, pending_limit_s)
    if claimed.state != "waiting":
        return claimed
    note = pod_note(pods, namespace)
    return Verdict("waiting", f"{verdict.line}; {claimed.line}" + (f"; {note}" if note else ""))


class KubectlError(Exception):
    pass


def kubectl_json(kubectl: str, *args: str) -> dict | None:
    """``kubectl ARGS -o json``; None when the object does not exist."""
    try:
        done = subprocess.run([kubectl, *args, "-o", "json"], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise KubectlError(f"{kubectl} not found: install kubectl or pass --kubectl PATH") from None
    except subprocess.TimeoutExpired:
        raise KubectlError(f"{kubectl} {' '.join(args)} did not answer in 60 s") from None
    if done.returncode != 0:
        if "NotFound" in done.stderr or "not found" in done.stderr:
            return None
        first = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[0]
        raise KubectlError(f"{kubectl} {' '.join(args)}: {first}")
    return json.loads(done.stdout)


def look(kubectl: str, namespace: str) -> tuple:
    job = kubectl_json(kubectl, "-n", namespace, "get", "job", JOB)
    claim = kubectl_json(kubectl, "-n", namespace, "get", "pvc", CLAIM)
    events, pods = [], []
    if claim is not None and claim.get("status", {}).get("phase") != "Bound":
        selector = f"involvedObject.kind=PersistentVolumeClaim,involvedObject.name={CLAIM}"
        found = kubectl_json(kubectl, "-n", namespace, "get", "events", "--field-selector", selector)
        events = (found or {}).get("items", [])
    if job is not None:
        found = kubectl_json(kubectl, "-n", namespace, "get", "pods", "-l", f"job-name={JOB}")
        pods = (found or {}).get("items", [])
    return job, claim, events, pods


def seconds(text: str) -> float:
    """A duration as kubectl writes it: 2h, 90m, 30s, or plain seconds."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([smh]?)", text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (examples: 2h, 90m, 600s, 600)")
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="wait_for_export.py")
    parser.add_argument("-n", "--namespace", default="tritonkit")
    parser.add_argument("--timeout", type=seconds, default=seconds("2h"), help="give up after this long (2h)")
    parser.add_argument(
        "--pending-limit", type=seconds, default=seconds("10m"), help="a claim Pending this long fails the wait (10m)"
    )
    parser.add_argument("--interval", type=seconds, default=seconds("10s"), help=argparse.SUPPRESS)
    parser.add_argument("--kubectl", default="kubectl", help="the kubectl to run (kubectl on PATH)")
    args = parser.parse_args(argv)

    start, said, errors = time.monotonic(), None, 0
    while True:
        try:
            now = datetime.now(timezone.utc)  # noqa: UP017 (datetime.UTC needs 3.11; any python3 runs this)
            verdict = decide(*look(args.kubectl, args.namespace), args.namespace, now, args.pending_limit)
            errors = 0
        except KubectlError as error:
            errors += 1
            if said is None or errors >= 6:  # at the start, or for a minute: not a passing API hiccup
                print(f"wait_for_export: {error}", file=sys.stderr)
                return 2
            verdict = Verdict("waiting", f"kubectl failed ({error}); trying again")
        if verdict.state == "complete":
            print(f"wait_for_export: {verdict.line}")
            return 0
        if verdict.state == "failed":
            print(f"wait_for_export: {verdict.line}", file=sys.stderr)
            return 1
        waited = time.monotonic() - start
        if verdict.line != said:
            print(f"wait_for_export: waiting ({waited:.0f} s): {verdict.line}", flush=True)
            said = verdict.line
        if waited >= args.timeout:
            print(
                f"wait_for_export: Job {JOB} not complete after {waited / 60:.0f} min: kubectl -n {args.namespace} "
                f"logs job/{JOB} shows where it is; wait again, or raise --timeout.",
                file=sys.stderr,
            )
            return 1
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
