#!/bin/bash
# Append each finished job's placement score to a log, one JSON object per line (docs/score.md).
#
# Install on the Slurm controller host as either
#   * a job completion script (slurm.conf):  JobCompType=jobcomp/script  JobCompLoc=/etc/slurm/topocast-score-job.sh
#     Slurm sets JOBID, NODES (hostlist) and START (epoch seconds) in its environment; or
#   * a controller epilog (slurm.conf):      EpilogSlurmctld=/etc/slurm/topocast-score-job.sh
#     Slurm sets SLURM_JOB_ID and SLURM_JOB_NODELIST; the start time is read with scontrol.
# Settings in /etc/default/topocast-score (TOPOCAST_STORE=s3://bucket/prefix | gs://... | /dir, TOPOCAST_CLUSTER,
# TOPOCAST_SCORE_LOG). The score is taken against the graph generation that was live when the job started.
# It never fails or delays the job: every error goes to the log as {"job": ..., "error": ...} and the script
# exits 0 within 30 seconds.
set -u
[ -r /etc/default/topocast-score ] && . /etc/default/topocast-score
TOPOCAST=${TOPOCAST:-/opt/topocast/bin/topocast}
STORE=${TOPOCAST_STORE:?set TOPOCAST_STORE in /etc/default/topocast-score}
CLUSTER=${TOPOCAST_CLUSTER:-default}
LOG=${TOPOCAST_SCORE_LOG:-/var/log/topocast/job-scores.jsonl}

job=${JOBID:-${SLURM_JOB_ID:-}}
nodes=${NODES:-${SLURM_JOB_NODELIST:-}}
start=${START:-}
if [ -z "$start" ] && [ -n "$job" ]; then
    # scontrol prints StartTime in the controller's local time, which `date -d` reads the same way
    when=$(scontrol show job -o "$job" 2>/dev/null | grep -o 'StartTime=[^ ]*' | cut -d= -f2)
    [ -n "$when" ] && start=$(date -d "$when" +%s 2>/dev/null)
fi
[ -z "$job" ] || [ -z "$nodes" ] || [ "$nodes" = "(null)" ] && exit 0   # never ran on a node: nothing to score

at=()
[ -n "$start" ] && [ "$start" != 0 ] && at=(--at "$(date -u -d "@$start" +%Y-%m-%dT%H:%M:%SZ)")
mkdir -p "$(dirname "$LOG")"
err=$(mktemp) && trap 'rm -f "$err"' EXIT
if out=$(timeout 30 "$TOPOCAST" score --store "$STORE" --cluster "$CLUSTER" --nodes "$nodes" --job-name "$job" \
        "${at[@]}" --json 2>"$err"); then
    printf '%s\n' "$out" | tr -d '\n' >>"$LOG"   # one line per job: the indented report joined
    echo >>"$LOG"
else
    reason=$(tail -n1 "$err" | tr -d '"\\' | cut -c1-300)
    printf '{"job": "%s", "nodes": "%s", "error": "%s"}\n' "$job" "$nodes" "$reason" >>"$LOG"
fi
exit 0
