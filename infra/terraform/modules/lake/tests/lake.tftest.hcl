# The module's logic with a mocked provider (offline, no credentials):
#   terraform init -backend=false && terraform test

mock_provider "aws" {
  mock_data "aws_caller_identity" {
    defaults = {
      account_id = "123456789012"
    }
  }
  mock_data "aws_iam_policy_document" {
    defaults = {
      json = "{\"Version\":\"2012-10-17\",\"Statement\":[]}"
    }
  }
}

variables {
  bucket = "lake-bucket"
  prefix = "runs/exp1"
}

run "roles_get_least_privilege_policies" {
  command = plan

  assert {
    condition     = length(aws_iam_role.lakeflow) == 5 && length(aws_iam_user.lakeflow) == 0
    error_message = "identity = role creates one IAM role per lakeflow role and no users"
  }
  assert {
    condition     = alltrue([for p in values(local.policies) : !strcontains(p, "\"s3:*\"") && !strcontains(p, "\"*\"")])
    error_message = "no policy may grant s3:* or name the resource *"
  }
  assert {
    condition     = alltrue([for p in values(local.policies) : alltrue([for s in jsondecode(p).Statement : s.Action != "s3:ListBucket" || can(s.Condition.StringLike["s3:prefix"])])])
    error_message = "every ListBucket is restricted by an s3:prefix condition"
  }
  assert {
    condition     = alltrue([for p in values(local.policies) : alltrue([for s in jsondecode(p).Statement : alltrue([for r in flatten([s.Resource]) : r == "arn:aws:s3:::lake-bucket" || startswith(r, "arn:aws:s3:::lake-bucket/runs/exp1/")])])])
    error_message = "every resource lies in the lake's bucket and prefix"
  }
  assert {
    condition     = !anytrue([for s in jsondecode(local.policies["raas"]).Statement : s.Action == "s3:PutObject" && anytrue([for r in flatten([s.Resource]) : strcontains(r, "/weights/")])]) && !strcontains(local.policies["analyst"], "s3:PutObject")
    error_message = "the rollout role must not write weights; the analyst must not write at all"
  }
  assert {
    condition     = aws_s3_bucket_public_access_block.lake.block_public_acls && aws_s3_bucket_public_access_block.lake.restrict_public_buckets
    error_message = "the bucket blocks public access"
  }
  assert {
    condition     = aws_s3_bucket_versioning.lake.versioning_configuration[0].status == "Enabled"
    error_message = "versioning is on by default"
  }
  assert {
    condition     = one([for r in aws_s3_bucket_lifecycle_configuration.lake[0].rule : r.expiration[0].days if r.id == "quarantine"]) == 30
    error_message = "_quarantine/ expires after quarantine_days"
  }
  assert {
    condition     = one([for r in aws_s3_bucket_lifecycle_configuration.lake[0].rule : r.abort_incomplete_multipart_upload[0].days_after_initiation if r.id == "abort-incomplete-multipart-uploads"]) == 1
    error_message = "incomplete multipart uploads are aborted"
  }
  assert {
    condition     = length(aws_s3_bucket_policy.tls_only) == 1
    error_message = "requests without TLS are denied by default"
  }
  assert {
    condition     = output.lake_url == "s3://lake-bucket/runs/exp1"
    error_message = "lake_url is what processes get as --lake"
  }
}

run "users_with_access_keys_for_s3_compatible_servers" {
  command = plan

  variables {
    identity    = "user"
    roles       = ["raas", "analyst"]
    require_tls = false
    versioning  = false
  }

  assert {
    condition     = length(aws_iam_user.lakeflow) == 2 && length(aws_iam_access_key.lakeflow) == 2 && length(aws_iam_role.lakeflow) == 0
    error_message = "identity = user creates a user and an access key per requested role"
  }
  assert {
    condition     = length(aws_s3_bucket_policy.tls_only) == 0
    error_message = "require_tls = false leaves the bucket policy out"
  }
  assert {
    condition     = alltrue([for r in aws_s3_bucket_lifecycle_configuration.lake[0].rule : length(r.noncurrent_version_expiration) == 0])
    error_message = "without versioning there are no noncurrent-version rules"
  }
}

run "kms_and_transition" {
  command = plan

  variables {
    kms_key_arn             = "arn:aws:kms:us-east-1:123456789012:key/abc"
    trajectories_transition = { days = 90, storage_class = "GLACIER_IR" }
  }

  assert {
    condition     = length(aws_iam_role_policy.kms) == 5
    error_message = "with a KMS key every role may use it"
  }
  assert {
    condition     = one([for r in aws_s3_bucket_lifecycle_configuration.lake[0].rule : one(r.transition).storage_class if r.id == "trajectories"]) == "GLACIER_IR"
    error_message = "old trajectories move to the chosen storage class"
  }
}

run "refuses_a_wildcard_prefix" {
  command = plan

  variables {
    prefix = "runs/*"
  }

  expect_failures = [var.prefix]
}

run "one_trainer_and_rollout_identity_per_model" {
  command = plan

  variables {
    models = ["alpha", "beta"]
  }

  assert {
    condition     = toset(keys(aws_iam_role.lakeflow)) == toset(["raas-alpha", "raas-beta", "trainer-alpha", "trainer-beta", "dataflow", "eval", "analyst"])
    error_message = "with models, raas and trainer get one identity per model and no identity for every model"
  }
  assert {
    condition     = strcontains(local.policies["trainer-alpha"], "/weights/alpha/*") && !strcontains(local.policies["trainer-alpha"], "/weights/beta/") && !strcontains(local.policies["trainer-alpha"], "/weights/*")
    error_message = "a model's trainer writes only that model's weights"
  }
  assert {
    condition     = strcontains(local.policies["raas-beta"], "/tasks/beta/*.claim") && !strcontains(local.policies["raas-beta"], "/tasks/alpha/") && !strcontains(local.policies["raas-beta"], "/trajectories/model=alpha/")
    error_message = "a model's rollout identity claims only that model's tasks and writes only its shards"
  }
}

run "refuses_a_bad_model_id" {
  command = plan

  variables {
    models = ["../other"]
  }

  expect_failures = [var.models]
}
