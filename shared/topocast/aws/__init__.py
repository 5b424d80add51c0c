"""AWS adapters: thin shells that give the cloud-neutral core S3, DynamoDB, SQS and SSM,
plus boto3 client construction (:mod:`.clients`) and EventBridge event parsing (:mod:`.events`).

boto3 is imported lazily inside functions so importing topocast stays cheap.
"""
