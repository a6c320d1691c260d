"""deploy/k8s/wait_for_export.py: the wait for the export Job ends at once on a failed Job or a claim that cannot
bind, with one line naming the problem and the fix. Decided on `kubectl get -o json` objects in the shapes a
cluster returns them (Job conditions, claim events of the persistentvolume-controller and of local-path, GKE's
and EBS's CSI provisioners); the command itself is run against a stand-in kubectl that prints them."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest

from deploy.k8s import wait_for_export as wait

CREATED = datetime(2026, 12, 3, 10, 0, 0, tzinfo=UTC)
NS = "tritonkit"
LIMIT = 600.0


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def job(*conditions: tuple[str, str, str], active: int = 0) -> dict:
    status = {"startTime": _stamp(CREATED), "active": active} if active else {"startTime": _stamp(CREATED)}
    if conditions:
        status["conditions"] = [
            {
                "type": kind,
                "status": "True",
                "reason": reason,
                "message": message,
                "lastTransitionTime": _stamp(CREATED),
            }
            for kind, reason, message in conditions
        ]
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "export", "namespace": NS}, "status": status}


RUNNING = job(active=1)
FAILED = job(
    ("FailureTarget", "BackoffLimitExceeded", "Job has reached the specified backoff limit"),
    ("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit"),
)
COMPLETE = job(
    ("SuccessCriteriaMet", "CompletionsReached", "Reached expected number of succeeded pods"),
    ("Complete", "CompletionsReached", "Reached expected number of succeeded pods"),
)


def claim(phase: str = "Pending", modes=("ReadWriteMany",), storage_class: str | None = "local-path") -> dict:
    spec = {"accessModes": list(modes), "resources": {"requests": {"storage": "20Gi"}}, "volumeMode": "Filesystem"}
    if storage_class:
        spec["storageClassName"] = storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "model-repository", "namespace": NS, "creationTimestamp": _stamp(CREATED)},
        "spec": spec,
        "status": {"phase": phase},
    }


def event(reason: str, message: str, after_s: int, kind: str = "Normal") -> dict:
    return {
        "kind": "Event",
        "metadata": {"name": f"model-repository.{after_s}", "creationTimestamp": _stamp(CREATED)},
        "involvedObject": {"kind": "PersistentVolumeClaim", "name": "model-repository", "namespace": NS},
        "reason": reason,
        "message": message,
        "type": kind,
        "lastTimestamp": _stamp(CREATED + timedelta(seconds=after_s)),
    }


FIRST_CONSUMER = event("WaitForFirstConsumer", "waiting for first consumer to be created before binding", 0)
EXTERNAL = event(
    "ExternalProvisioning",
    "Waiting for a volume to be created either by the external provisioner 'rancher.io/local-path' or manually by "
    "the system administrator. If volume creation is delayed, please verify that the provisioner is running and "
    "correctly registered.",
    2,
)
LOCAL_PATH_REFUSES = event(
    "ProvisioningFailed",
    'failed to provision volume with StorageClass "local-path": Only support ReadWriteOnce access mode',
    3,
    "Warning",
)
GKE_REFUSES = event(
    "ProvisioningFailed",
    'failed to provision volume with StorageClass "standard-rwo": rpc error: code = InvalidArgument desc = '
    "VolumeCapabilities is invalid: specified multi writer with mount access type",
    3,
    "Warning",
)
EBS_REFUSES = event(
    "ProvisioningFailed",
    'failed to provision volume with StorageClass "gp2": rpc error: code = InvalidArgument desc = Volume '
    "capabilities MULTI_NODE_MULTI_WRITER not supported. Only AccessModes[ReadWriteOnce] supported.",
    3,
    "Warning",
)
TIMED_OUT = event(
    "ProvisioningFailed",
    'failed to provision volume with StorageClass "filestore": rpc error: code = DeadlineExceeded desc = context '
    "deadline exceeded",
    3,
    "Warning",
)
NO_CLASS = event(
    "FailedBinding", "no persistent volumes available for this claim and no storage class is set", 1, "Normal"
)
GPU_HELD = {
    "kind": "Pod",
    "metadata": {"name": "export-x7k2p", "labels": {"job-name": "export"}},
    "status": {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 nodes are "
                "available: 1 No preemption victims found for incoming pod.",
            }
        ],
    },
}


def decide(job_obj, claim_obj, events=(), pods=(), age_s: float = 20) -> wait.Verdict:
    return wait.decide(job_obj, claim_obj, list(events), list(pods), NS, CREATED + timedelta(seconds=age_s), LIMIT)


# --- decisions -----------------------------------------------------------------------------------------


def test_a_failed_job_ends_the_wait_with_its_reason_and_how_to_read_and_rerun_it():
    verdict = decide(FAILED, claim("Bound"))
    assert verdict.state == "failed"
    for words in ("BackoffLimitExceeded", "kubectl -n tritonkit logs job/export", "delete job export"):
        assert words in verdict.line, verdict.line


def test_a_job_past_its_deadline_fails_the_wait_too():
    verdict = decide(job(("Failed", "DeadlineExceeded", "Job was active longer than specified deadline")), None)
    assert verdict.state == "failed" and "DeadlineExceeded" in verdict.line


def test_a_complete_job_ends_the_wait_even_after_its_claim_is_gone_from_view():
    assert decide(COMPLETE, None).state == "complete"


@pytest.mark.parametrize("refusal", [LOCAL_PATH_REFUSES, GKE_REFUSES, EBS_REFUSES], ids=["local-path", "gke", "ebs"])
def test_a_class_that_refuses_read_write_many_fails_at_once_naming_both_fixes(refusal):
    verdict = decide(RUNNING, claim(), [FIRST_CONSUMER, EXTERNAL, refusal], age_s=5)
    assert verdict.state == "failed"
    assert refusal["message"].split(":")[0] in verdict.line  # the provisioner's own words
    for words in ("ReadWriteMany", "overlays/gpu-single-node/export", "components/storage-class", "delete pvc"):
        assert words in verdict.line, verdict.line


def test_a_passing_provisioning_error_is_given_two_minutes():
    assert decide(RUNNING, claim(storage_class="filestore"), [TIMED_OUT], age_s=30).state == "waiting"
    late = decide(RUNNING, claim(storage_class="filestore"), [TIMED_OUT], age_s=wait.PROVISIONING_GRACE_S + 1)
    assert late.state == "failed" and "context deadline exceeded" in late.line


def test_no_storage_class_at_all_fails_at_once():
    verdict = decide(RUNNING, claim(modes=("ReadWriteOnce",), storage_class=None), [NO_CLASS])
    assert verdict.state == "failed"
    assert "no default StorageClass" in verdict.line and "components/storage-class" in verdict.line
    assert "gpu-single-node" not in verdict.line, "a ReadWriteOnce claim needs a class, not another overlay"


def test_a_claim_pending_past_the_limit_fails_with_the_describe_command():
    assert decide(RUNNING, claim(), [EXTERNAL], age_s=LIMIT - 1).state == "waiting"
    verdict = decide(RUNNING, claim(), [EXTERNAL], age_s=LIMIT + 1)
    assert verdict.state == "failed" and "kubectl -n tritonkit describe pvc model-repository" in verdict.line


def test_a_claim_waiting_for_its_pod_waits_and_says_when_triton_holds_the_gpu():
    verdict = decide(RUNNING, claim(), [FIRST_CONSUMER], [GPU_HELD], age_s=LIMIT * 3)
    assert verdict.state == "waiting"
    assert "Insufficient nvidia.com/gpu" in verdict.line
    assert "kubectl -n tritonkit scale deployment/triton --replicas=0" in verdict.line


def test_a_running_job_on_a_bound_claim_keeps_waiting():
    verdict = decide(RUNNING, claim("Bound"), age_s=LIMIT * 10)
    assert verdict.state == "waiting" and "Job export is running" in verdict.line


def test_no_job_fails_naming_the_export_stage():
    verdict = decide(None, None)
    assert verdict.state == "failed" and "apply the export stage" in verdict.line


# --- the command, against a stand-in kubectl -------------------------------------------------------------


def _kubectl(tmp_path, **objects) -> str:
    """A kubectl that answers `-n NS get KIND NAME... -o json` from ``objects`` (job, pvc, events, pods)."""
    (tmp_path / "objects.json").write_text(json.dumps(objects))
    fake = tmp_path / "kubectl"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        f"objects = json.load(open({str(tmp_path / 'objects.json')!r}))\n"
        "kind = sys.argv[4]\n"
        "if kind not in objects:\n"
        "    sys.exit(print(f'Error from server (NotFound): {kind} \"x\" not found', file=sys.stderr) or 1)\n"
        "print(json.dumps(objects[kind]))\n"
    )
    fake.chmod(0o755)
    return str(fake)


def _run(kubectl: str, *extra: str) -> tuple[subprocess.CompletedProcess, float]:
    script = wait.__file__
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, script, "--kubectl", kubectl, "--interval", "0.2", *extra],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done, time.monotonic() - start


def _fresh_claim(**kwargs) -> dict:
    obj = claim(**kwargs)
    obj["metadata"]["creationTimestamp"] = _stamp(datetime.now(UTC) - timedelta(seconds=20))
    return obj


def test_the_command_returns_non_zero_at_once_on_a_failed_job(tmp_path):
    done, took = _run(_kubectl(tmp_path, job=FAILED, pvc=_fresh_claim(phase="Bound"), pods={"items": []}))
    assert done.returncode == 1 and took < 10
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("wait_for_export: Job export failed (BackoffLimitExceeded")


def test_the_command_returns_non_zero_at_once_on_a_claim_that_cannot_bind(tmp_path):
    events = {"items": [FIRST_CONSUMER, EXTERNAL, LOCAL_PATH_REFUSES]}
    done, took = _run(_kubectl(tmp_path, job=RUNNING, pvc=_fresh_claim(), events=events, pods={"items": []}))
    assert done.returncode == 1 and took < 10
    (line,) = done.stderr.strip().splitlines()
    assert "Only support ReadWriteOnce access mode" in line and "gpu-single-node" in line


def test_the_command_returns_zero_on_a_complete_job(tmp_path):
    done, _ = _run(_kubectl(tmp_path, job=COMPLETE, pvc=_fresh_claim(phase="Bound"), pods={"items": []}))
    assert done.returncode == 0 and "complete" in done.stdout and not done.stderr


def test_the_command_gives_up_at_its_timeout_with_one_line(tmp_path):
    done, _ = _run(
        _kubectl(tmp_path, job=RUNNING, pvc=_fresh_claim(phase="Bound"), pods={"items": []}), "--timeout", "0.5s"
    )
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert "not complete after" in line and "logs job/export" in line
    assert done.stdout.count("waiting") == 1, "an unchanged state is said once"


def test_the_command_says_in_one_line_when_kubectl_cannot_run(tmp_path):
    done, _ = _run(str(tmp_path / "no-kubectl"))
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "not found" in line and "--kubectl" in line


def test_a_duration_that_is_not_one_is_refused_naming_the_flag(tmp_path):
    done, _ = _run(_kubectl(tmp_path), "--timeout", "soon")
    assert done.returncode == 2 and "--timeout" in done.stderr and "Traceback" not in done.stderr
