output "bucket" {
  description = "The lake's bucket."
  value       = aws_s3_bucket.lake.bucket
}

output "bucket_arn" {
  description = "ARN of the lake's bucket."
  value       = aws_s3_bucket.lake.arn
}

output "lake_url" {
  description = "What every lakeflow process gets as --lake (or LAKEFLOW_LAKE)."
  value       = "s3://${aws_s3_bucket.lake.bucket}/${var.prefix}"
}

output "role_arns" {
  description = "identity = 'role': lakeflow identity (role, or role-<model> with models) -> IAM role ARN (for pod identities, instance profiles, AWS_ROLE_ARN)."
  value       = { for role, r in aws_iam_role.lakeflow : role => r.arn }
}

output "role_names" {
  description = "identity = 'role': lakeflow identity -> IAM role name (to attach more policies, e.g. a replica's reads)."
  value       = { for role, r in aws_iam_role.lakeflow : role => r.name }
}

output "user_names" {
  description = "identity = 'user': lakeflow identity -> IAM user name."
  value       = { for role, u in aws_iam_user.lakeflow : role => u.name }
}

output "access_keys" {
  description = "identity = 'user': lakeflow identity -> AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY of its user."
  sensitive   = true
  value = {
    for role, k in aws_iam_access_key.lakeflow : role => {
      AWS_ACCESS_KEY_ID     = k.id
      AWS_SECRET_ACCESS_KEY = k.secret
    }
  }
}

output "policies" {
  description = "lakeflow identity -> its IAM policy document (JSON), as attached."
  value       = local.policies
}

output "env" {
  description = "lakeflow role -> environment every process of that role needs besides its credentials."
  value = {
    for role in var.roles : role => {
      LAKEFLOW_LAKE = "s3://${aws_s3_bucket.lake.bucket}/${var.prefix}"
      AWS_REGION    = aws_s3_bucket.lake.region
    }
  }
}
