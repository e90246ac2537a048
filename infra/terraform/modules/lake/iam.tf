# One identity per lakeflow role, with the policy rendered from lakeflow's permission model:
# policies/<role>.json.tftpl is written by `lakeflow infra render` (tests/infra checks it has not drifted).
# With `models`, the per-model roles (raas, trainer) get one identity per model ("trainer-<model>"),
# whose policy reaches only that model's keys; without, one identity for every model ("trainer").

locals {
  per_model = toset(["raas", "trainer"])
  identities = merge(
    { for role in var.roles : role => { role = role, model = "*" } if !(contains(local.per_model, role) && length(var.models) > 0) },
    { for pair in setproduct(tolist(var.roles), tolist(var.models)) : "${pair[0]}-${pair[1]}" => { role = pair[0], model = pair[1] } if contains(local.per_model, pair[0]) },
  )
  policies = {
    for id, v in local.identities : id => jsonencode(jsondecode(templatefile("${path.module}/policies/${v.role}.json.tftpl", {
      bucket    = aws_s3_bucket.lake.bucket
      root      = local.root
      partition = var.partition
      model     = v.model
    })))
  }
  kms_policy = var.kms_key_arn == null ? null : jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid      = "LakeKey"
      Effect   = "Allow"
      Action   = ["kms:Decrypt", "kms:GenerateDataKey"]
      Resource = var.kms_key_arn
    }]
  })
  as_roles = var.identity == "role" ? local.identities : {}
  as_users = var.identity == "user" ? local.identities : {}
  kms_for  = var.kms_key_arn == null ? {} : local.identities
}

data "aws_caller_identity" "current" {
  count = var.identity == "role" ? 1 : 0
}

data "aws_iam_policy_document" "trust" {
  for_each = local.as_roles
  statement {
    actions = ["sts:AssumeRole", "sts:TagSession"]
    principals {
      type        = "AWS"
      identifiers = lookup(var.trusted_principals, each.key, lookup(var.trusted_principals, each.value.role, ["arn:${var.partition}:iam::${data.aws_caller_identity.current[0].account_id}:root"]))
    }
  }
}

resource "aws_iam_role" "lakeflow" {
  for_each             = local.as_roles
  name                 = "${var.name_prefix}-${each.key}"
  description          = "lakeflow ${each.key} for s3://${var.bucket}/${var.prefix}"
  assume_role_policy   = data.aws_iam_policy_document.trust[each.key].json
  max_session_duration = 43200
  tags                 = var.tags
}

resource "aws_iam_role_policy" "lake" {
  for_each = local.as_roles
  name     = "lake"
  role     = aws_iam_role.lakeflow[each.key].id
  policy   = local.policies[each.key]
}

resource "aws_iam_role_policy" "kms" {
  for_each = var.identity == "role" ? local.kms_for : {}
  name     = "lake-key"
  role     = aws_iam_role.lakeflow[each.key].id
  policy   = local.kms_policy
}

resource "aws_iam_user" "lakeflow" {
  for_each = local.as_users
  name     = "${var.name_prefix}-${each.key}"
  tags     = var.tags
}

resource "aws_iam_user_policy" "lake" {
  for_each = local.as_users
  name     = "lake"
  user     = aws_iam_user.lakeflow[each.key].name
  policy   = local.policies[each.key]
}

resource "aws_iam_user_policy" "kms" {
  for_each = var.identity == "user" ? local.kms_for : {}
  name     = "lake-key"
  user     = aws_iam_user.lakeflow[each.key].name
  policy   = local.kms_policy
}

resource "aws_iam_access_key" "lakeflow" {
  for_each = local.as_users
  user     = aws_iam_user.lakeflow[each.key].name
}
