#!/bin/sh
# The role policies for MinIO, from lakeflow's permission model. MinIO does not know S3's
# s3:if-none-match / s3:if-match condition keys, so they are left out: on MinIO a rollout
# service could overwrite a trajectory shard, which AWS refuses (docs/security.md).
set -eu
bucket=${LAKE_BUCKET:-lake}
prefix=${LAKE_PREFIX:-runs/local}
mkdir -p "$(dirname "$0")/policies"
for role in raas dataflow trainer eval analyst; do
  lakeflow infra policy --role "$role" --bucket "$bucket" --prefix "$prefix" --no-write-conditions \
    > "$(dirname "$0")/policies/$role.json"
done
echo "policies for s3://$bucket/$prefix in $(dirname "$0")/policies/"
