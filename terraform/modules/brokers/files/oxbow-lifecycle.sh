#!/bin/bash
# The scale-in half of the autoscaling contract. The group's termination lifecycle hook
# holds a terminating instance in Terminating:Wait; EC2 Auto Scaling then sets the
# instance-metadata item autoscaling/target-lifecycle-state to "Terminated". This polls it,
# stops the broker the graceful way (SIGTERM: hand every partition over, upload the WAL,
# deregister), and only then completes the lifecycle action so the instance is terminated.
# If the stop fails or times out the action is completed anyway: the broker's lease then
# expires and its partitions fail over, as after a crash.
set -uo pipefail

DEPLOY_ENV="${OXBOW_DEPLOY_ENV:-/etc/oxbow/deploy.env}"
IMDS="${IMDS_ENDPOINT:-http://169.254.169.254}"
POLL_SECONDS="${OXBOW_LIFECYCLE_POLL_SECONDS:-5}"
STOP_COMMAND="${OXBOW_STOP_COMMAND:-systemctl stop oxbow.service}"
# shellcheck source=/dev/null
. "$DEPLOY_ENV"

md() {
    local token
    token="$(curl -fsS --max-time 5 -X PUT "$IMDS/latest/api/token" \
        -H "X-aws-ec2-metadata-token-ttl-seconds: 60")" || return 1
    curl -fsS --max-time 5 -H "X-aws-ec2-metadata-token: $token" "$IMDS/latest/meta-data/$1"
}
log() { echo "oxbow-lifecycle: $*"; }

while :; do
    state="$(md autoscaling/target-lifecycle-state 2>/dev/null || true)"
    [ "$state" = "Terminated" ] && break
    sleep "$POLL_SECONDS"
done

instance_id="$(md instance-id)"
region="$(md placement/region)"
log "instance $instance_id is being terminated: stopping the broker (handoff)"
started="$(date +%s)"
if sh -c "$STOP_COMMAND"; then outcome="stopped"; else outcome="stop failed (exit $?)"; fi
log "broker $outcome after $(($(date +%s) - started)) s; completing lifecycle action"
for attempt in 1 2 3 4 5; do
    if aws autoscaling complete-lifecycle-action \
        --region "$region" \
        --auto-scaling-group-name "$ASG_NAME" \
        --lifecycle-hook-name "$LIFECYCLE_HOOK_NAME" \
        --instance-id "$instance_id" \
        --lifecycle-action-result CONTINUE; then
        log "lifecycle action completed"
        exit 0
    fi
    log "complete-lifecycle-action failed (attempt $attempt); retrying"
    sleep $((attempt * 2))
done
# The hook's heartbeat timeout (default result CONTINUE) ends the wait anyway.
exit 1
