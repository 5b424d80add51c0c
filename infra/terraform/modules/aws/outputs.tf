output "bucket_name" {
  description = "Bucket holding graphs, rendered files and publish state (TOPOCAST_BUCKET)."
  value       = aws_s3_bucket.this.id
}

output "bucket_arn" {
  description = "ARN of the bucket."
  value       = aws_s3_bucket.this.arn
}

output "function_names" {
  description = "Lambda function names by stage (discover, render, publish)."
  value       = { for k, f in aws_lambda_function.this : k => f.function_name }
}

output "function_arns" {
  description = "Lambda function ARNs by stage."
  value       = { for k, f in aws_lambda_function.this : k => f.arn }
}

output "role_arns" {
  description = "IAM role ARNs by stage."
  value       = { for k, r in aws_iam_role.this : k => r.arn }
}

output "queue_urls" {
  description = "SQS queue URLs: events (discover's input), timer (render's), publish (publish's)."
  value       = { for k, q in aws_sqs_queue.main : k => q.url }
}

output "dead_letter_queue_urls" {
  description = "Dead-letter queue URLs by source queue."
  value       = { for k, q in aws_sqs_queue.dlq : k => q.url }
}

output "state_table_name" {
  description = "DynamoDB table holding the debounce state (TOPOCAST_STATE_TABLE)."
  value       = aws_dynamodb_table.debounce.name
}

output "event_rule_arns" {
  description = "EventBridge rule ARNs by purpose (ec2-state, ec2-notices, reconcile, autoscaling)."
  value       = { for k, r in aws_cloudwatch_event_rule.this : k => r.arn }
}

output "ssm_path" {
  description = "SSM path the publish function writes the Slurm files under (the pull agent's --source is ssm://<path>/topology.conf)."
  value       = local.ssm_path
}

output "guard_override_parameter" {
  description = "SSM parameter to set to a generation number to release a held publish."
  value       = local.guard_override_parameter
}

output "uploads_prefix" {
  description = "Key prefix for on-prem collector uploads (s3://<bucket>/<prefix>)."
  value       = local.uploads_key
}

output "pull_agent_policy_json" {
  description = "IAM policy JSON for the Slurm head node's pull agent."
  value       = data.aws_iam_policy_document.pull_agent.json
}

output "pull_agent_policy_arn" {
  description = "ARN of the pull agent policy when create_pull_agent_policy is true, else null."
  value       = one(aws_iam_policy.pull_agent[*].arn)
}

output "function_environment" {
  description = "Environment variables set on each function (for debugging and the one-shot CLI)."
  value       = local.function_env
}

output "pull_watch_queue_urls" {
  description = "Head node -> the SQS queue its `topocast pull --watch --queue-url` long-polls."
  value       = { for k, q in aws_sqs_queue.pull_watch : k => q.url }
}

output "pull_watch_policy_arns" {
  description = "Head node -> the IAM policy to attach to its role for `pull --watch` (its own queue only)."
  value       = { for k, p in aws_iam_policy.pull_watch_agent : k => p.arn }
}
