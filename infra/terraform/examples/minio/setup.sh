#!/bin/sh
# Runs inside the minio/mc container: the bucket, one policy and one user per lakeflow role.
# Each user's secret is printed once; keep them (e.g. as profiles in ~/.aws/credentials).
set -eu
mc alias set lake http://minio:9000 "$MINIO_ROOT_USER" "$MINIO_ROOT_PASSWORD" >/dev/null
mc mb --ignore-existing "lake/$LAKE_BUCKET"
mc anonymous set none "lake/$LAKE_BUCKET"
for role in raas dataflow trainer eval analyst; do
  mc admin policy create lake "lakeflow-$role" "/policies/$role.json"
  secret=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
  mc admin user add lake "lakeflow-$role" "$secret" >/dev/null
  mc admin policy attach lake "lakeflow-$role" --user "lakeflow-$role" >/dev/null || true
  printf '[lakeflow-%s]\naws_access_key_id = lakeflow-%s\naws_secret_access_key = %s\n\n' "$role" "$role" "$secret"
done
